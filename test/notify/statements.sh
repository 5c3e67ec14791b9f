# Sourced by test/notify/run.sh (its ok/is helpers, $work, sql): monthly statements rendered by
# a real browser. statement_html() of one account per centre (test/notify/sample_site.sql)
# is written to a file, headless Chromium renders it to PNG, and the test checks the page,
# its charts' series in the SVG, and that the picture has the charts' colours.
# HPCACCT_UPDATE_SAMPLES=1 copies the pictures to test/notify/samples/ (the README's).

createdb hpcacct_statements
psql -X -q -v ON_ERROR_STOP=1 -d hpcacct_statements \
     -c 'CREATE EXTENSION hpcacct CASCADE' -c 'SELECT hpcacct.create_job_table()' >/dev/null 2>&1
psql -X -q -v ON_ERROR_STOP=1 -d hpcacct_statements -f test/notify/sample_site.sql >"$work/site.log" 2>&1
ok $? "the sample site loads" "$(tail -3 "$work/site.log")"

# pixels of a colour (within 6 %) in a PNG
pixels_of() {
    convert "$1" -alpha off -fuzz 6% -fill white +opaque "$2" -fill black -opaque "$2" \
        -format '%[fx:round((1 - mean) * w * h)]' info: 2>/dev/null
}

# centre account month series-per-chart (comma-separated) points-of-the-first-line
while read -r centre account month per_chart points; do
    page=$work/$centre.html
    png=$work/$centre.png
    psql -X -At -v ON_ERROR_STOP=1 -d hpcacct_statements \
         -c "SELECT hpcacct.statement_html('$account', '$month')" >"$page" 2>"$work/$centre.err"
    ok $? "$centre: statement_html('$account', '$month') renders" "$(cat "$work/$centre.err")"
    head -c 15 "$page" | grep -q '<!DOCTYPE html>'; ok $? "$centre: an HTML page"
    [ "$(grep -c -e '<script' -e 'src=' -e 'href=' -e '@import' "$page")" -eq 0 ]
    ok $? "$centre: self-contained (no script, no external resource)"
    got=$(sed 's/<svg /\n<svg /g' "$page" | grep '^<svg ' | while read -r svg; do
              grep -o 'class="series"' <<<"$svg" | wc -l; done | paste -sd,)
    is "$got" "$per_chart" "$centre: charts with $per_chart series"
    got=$(grep -o '<polyline class="series"[^>]*points="[^"]*"' "$page" | head -1 | sed 's/.*points="//; s/"$//' | wc -w)
    if [ "$points" -eq 0 ]; then what='bars only, no line'
    elif [ "$points" -gt 31 ]; then what='a point per day on its first line'
    else what='a point per month on its first line'; fi
    is "$got" "$points" "$centre: $what"
    u=$(mktemp -d "$work/chromium.XXXXXX")
    timeout 120 chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
        --disable-background-networking --disable-component-update --disable-sync --user-data-dir="$u" \
        --hide-scrollbars --screenshot="$png" --window-size=900,1500 "file://$page" >"$work/chromium.log" 2>&1
    [ -s "$png" ]; ok $? "$centre: Chromium renders it to PNG" "$(tail -2 "$work/chromium.log")"
    nonwhite=$(convert "$png" -colorspace Gray -threshold 95% -format '%[fx:round((1 - mean) * 10000)]' info: 2>/dev/null)
    [ "${nonwhite:-0}" -ge 300 ]; ok $? "$centre: the picture is not blank (${nonwhite:-0} of 10 000 pixels dark)"
    blue=$(pixels_of "$png" '#1f77b4')
    [ "${blue:-0}" -ge 400 ]; ok $? "$centre: the main series is drawn (${blue:-0} pixels of its blue)"
    if [ "${HPCACCT_UPDATE_SAMPLES:-0}" = 1 ]; then
        mkdir -p test/notify/samples
        convert "$png" -trim -bordercolor white -border 12 "test/notify/samples/$centre.png"
    fi
done <<'CASES'
genci gen7001 2025-09-01 4,2 273
rwth rwth0042 2025-04-01 3,2 4
hlrn nip00042 2025-05-01 2,2 61
computecanada def-smith 2025-10-01 2 0
lqcd lqcd-hisq 2025-12-01 2 0
CASES

# a chart of small figures (2 NPL; an empty quota) labels each grid line with its own figure
labels=$(psql -X -At -d hpcacct_statements -c "SELECT hpcacct_internal.svg_chart('t', 'NPL', ARRAY['a', 'b'],
             '[{\"name\": \"x\", \"kind\": \"line\", \"color\": \"#1f77b4\", \"values\": [0, 2]}]')" |
         grep -o 'text-anchor="end">[^<]*<' | sed 's/.*>//; s/<$//' | paste -sd' ')
[ -n "$labels" ] && [ -z "$(tr ' ' '\n' <<<"$labels" | sort | uniq -d)" ]
ok $? "a chart from 0 to 2 has no repeated y label ($labels)"

# ---- hpcacct-report: the statements to files, with libpq's connection options ----
report=$("$pg_config" --bindir)/hpcacct-report
[ -x "$report" ]; ok $? "hpcacct-report is installed in PostgreSQL's bindir"
psql -X -At -d hpcacct_statements -c "SELECT hpcacct.statement_html('def-smith', '2025-10-01')" >"$work/expected.html"
"$report" -d hpcacct_statements def-smith 2025-10 >"$work/stdout.html" 2>"$work/report.err"; rc=$?
[ $rc -eq 0 ] && cmp -s "$work/stdout.html" "$work/expected.html"
ok $? "hpcacct-report ACCOUNT MONTH writes statement_html() to standard output (exit $rc)" "$(cat "$work/report.err")"
PGDATABASE=hpcacct_statements "$report" -o "$work/file.html" def-smith 2025-10-17 2>"$work/report.err"; rc=$?
[ $rc -eq 0 ] && cmp -s "$work/file.html" "$work/expected.html"
ok $? "-o FILE, the database from PGDATABASE, a day naming its month" "$(cat "$work/report.err")"
"$report" -d "postgresql:///hpcacct_statements?host=$PGHOST" --json nip00042 2025-05 >"$work/month.json" 2>"$work/report.err"
is "$(psql -X -At -d hpcacct_statements -c "SELECT (\$\$$(cat "$work/month.json")\$\$::jsonb) = hpcacct.account_month('nip00042', '2025-05-01')")" t \
   "--json writes account_month() (a URI for -d)"
# what it writes does not follow the formatting settings its environment gives the session
# (with extra_float_digits -15 a GENCI page's TC of 3 000.5 hours was 3e+03, printed 3,000.00)
"$report" -d hpcacct_statements gen7001 2025-09 >"$work/genci-default.html" 2>/dev/null
"$report" -d hpcacct_statements --json gen7001 2025-09 >"$work/genci-default.json" 2>/dev/null
for opts in '-c DateStyle=German -c IntervalStyle=sql_standard -c extra_float_digits=-15' \
            '-c DateStyle=SQL,DMY -c IntervalStyle=iso_8601 -c extra_float_digits=0'; do
    PGOPTIONS="$opts" "$report" -d hpcacct_statements gen7001 2025-09 >"$work/genci-opts.html" 2>"$work/report.err"
    PGOPTIONS="$opts" "$report" -d hpcacct_statements --json gen7001 2025-09 >"$work/genci-opts.json" 2>>"$work/report.err"
    [ -s "$work/genci-default.html" ] && cmp -s "$work/genci-opts.html" "$work/genci-default.html" \
        && cmp -s "$work/genci-opts.json" "$work/genci-default.json"
    ok $? "PGOPTIONS='$opts': the same page and JSON as a default session's" "$(cat "$work/report.err")"
done
mkdir "$work/all"
"$report" -d hpcacct_statements --all -o "$work/all" 2025-05 2>"$work/report.err"; rc=$?
is "$rc $(cd "$work/all" && ls | paste -sd' ')" \
   "0 $(psql -X -At -d hpcacct_statements -c "SELECT string_agg(a || '-2025-05.html', ' ' ORDER BY a) FROM hpcacct.statement_accounts('2025-05-01') a")" \
   "--all writes one file per account of the month, named ACCOUNT-YYYY-MM.html"
grep -q 'Statement of account <bdi>rwth0042</bdi>' "$work/all/rwth0042-2025-05.html" && grep -q '^hpcacct-report: 4 statements' "$work/report.err"
ok $? "each with its account's statement, and says how many" "$(cat "$work/report.err")"
out=$("$report" -d hpcacct_statements -o "$work/nobody.html" nobody 2025-05 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q 'account "nobody" does not exist or is not visible to you (SQLSTATE 42704)' <<<"$out" && [ ! -e "$work/nobody.html" ]
ok $? "an unknown account: exit 1, the server's message with its SQLSTATE, no file" "$out (exit $rc)"
out=$("$report" -d hpcacct_statements def-smith 2999-01 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q 'month 2999-01 has not begun (SQLSTATE 22023)' <<<"$out"
ok $? "a month that has not begun: exit 1 (22023)" "$out (exit $rc)"
out=$("$report" -d hpcacct_statements --all -o "$work/all" 2999-01 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q 'SQLSTATE 22023' <<<"$out"
ok $? "--all for a month that has not begun: exit 1" "$out (exit $rc)"
out=$("$report" -d hpcacct_statements def-smith 2025-13 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q 'the month must be YYYY-MM' <<<"$out"
ok $? "a month that is no month: a usage error (exit 2)" "$out (exit $rc)"
# a day names its month only when it is a day of it (and there is no year 0)
for bad in 2025-05-40 2025-02-29 2025-04-31 2025-05-00 0000-05; do
    out=$("$report" -d hpcacct_statements def-smith "$bad" 2>&1); rc=$?
    [ $rc -eq 2 ] && grep -q "the month must be YYYY-MM (e.g. 2025-05), not \"$bad\"" <<<"$out"
    ok $? "$bad is no day of a month: a usage error (exit 2)" "$(head -c 300 <<<"$out") (exit $rc)"
done
out=$("$report" -d hpcacct_statements --json def-smith 2024-02-29 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q '"month": "2024-02"' <<<"$out"
ok $? "2024-02-29, a leap day, names February 2024" "$(head -c 300 <<<"$out") (exit $rc)"
out=$("$report" -d hpcacct_statements --all 2025-05 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q -- '--all needs -o DIRECTORY' <<<"$out"
ok $? "--all without a directory: exit 2" "$out (exit $rc)"
out=$("$report" -d 'dbname=hpcacct_no_such_db' def-smith 2025-05 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q 'cannot connect to the database' <<<"$out"
ok $? "a database that does not exist: exit 1" "$out (exit $rc)"
# the temporary file is created afresh (the directory may be shared, and its name guessed): a
# link planted at the name the process id would give is left alone, not written through
echo precious >"$work/victim"
bash -c 'ln -s "$1" "$2.tmp.$$" && exec "$3" -d hpcacct_statements -o "$2" def-smith 2025-10' _ \
     "$work/victim" "$work/planted.html" "$report" 2>"$work/report.err"; rc=$?
[ $rc -eq 0 ] && [ "$(cat "$work/victim")" = precious ] && cmp -s "$work/planted.html" "$work/expected.html" &&
    [ -z "$(find "$work" -maxdepth 1 -name 'planted.html.tmp.*' ! -type l)" ]
ok $? "-o FILE writes no file through a link planted at a guessable temporary name" "$(cat "$work/report.err") (exit $rc)"

# ---- hostile names: markup, quotes, CR/LF, U+2028, a right-to-left override, a long name ----
createdb hpcacct_hostile
psql -X -q -v ON_ERROR_STOP=1 -d hpcacct_hostile \
     -c 'CREATE EXTENSION hpcacct CASCADE' -c 'SELECT hpcacct.create_job_table()' >/dev/null 2>&1 &&
    psql -X -q -v ON_ERROR_STOP=1 -d hpcacct_hostile -f test/notify/hostile_site.sql >"$work/hostile.log" 2>&1
ok $? "the site of hostile names loads" "$(tail -3 "$work/hostile.log")"
psql -X -At -d hpcacct_hostile -c "SELECT hpcacct.statement_html(name, '2025-05-01') FROM hpcacct.account
                                   WHERE name LIKE '<script>%'" >"$work/hostile.html"
u=$(mktemp -d "$work/chromium.XXXXXX")
timeout 120 chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking \
    --disable-component-update --disable-sync --user-data-dir="$u" --dump-dom "file://$work/hostile.html" \
    >"$work/hostile.dom" 2>"$work/chromium.log"
# the DOM Chromium built: its elements, and the text of the heading and of the cells
"$python" - "$work/hostile.dom" >"$work/hostile.txt" <<'PY'
import sys
from html.parser import HTMLParser
class Dom(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.path, self.tags, self.h1, self.bdi_in_h1, self.cells, self.events = [], set(), '', [], [], []
        self.title = ''
    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        self.events += [k for k, _ in attrs if k.startswith('on')]
        if tag == 'bdi' and 'h1' in self.path:
            self.bdi_in_h1.append('')
        if tag == 'td':
            self.cells.append('')
        self.path.append(tag)
    def handle_endtag(self, tag):
        while self.path and self.path.pop() != tag:
            pass
    def handle_data(self, d):
        if 'title' in self.path:
            self.title += d
        if 'h1' in self.path:
            self.h1 += d
            if 'bdi' in self.path:
                self.bdi_in_h1[-1] += d
        if 'td' in self.path:
            self.cells[-1] += d
d = Dom()
d.feed(open(sys.argv[1], encoding='utf-8').read())
print('tags', ' '.join(sorted(t for t in d.tags if t in ('script', 'img', 'b', 'u', 'desc'))) or '-')
print('events', ' '.join(d.events) or '-')
print('h1', repr(d.h1))
print('title', repr(d.title))
print('bdi', repr(d.bdi_in_h1))
print('cells', repr([c for c in d.cells if '<' in c]))
PY
name="'<script>alert(1)</script>\"q\\'&amp;\\nx\\u2028y\\u202eevil'"
is "$(sed -n 's/^tags //p; s/^events //p' "$work/hostile.txt" | paste -sd' ')" "- -" \
   "hostile names: Chromium's DOM has no script, img or other element and no handler from them"
is "$(sed -n 's/^h1 //p' "$work/hostile.txt")" "'Statement of account ${name:1:-1} — May 2025'" \
   "the heading shows the account's name as text (CR/LF as a line break, as HTML reads it)"
is "$(sed -n 's/^cells //p' "$work/hostile.txt")" \
   "['cl<b>\"&\\'\\u202e', 'p</text><script>alert(3)</script>', '<img src=x onerror=alert(2)>u\"\\'&\\u202e', 'NPL<u>&\"', 'NPL<u>&\"', '1,000.00 NPL<u>&\"', '880.00 NPL<u>&\"', 'cl<b>\"&\\'\\u202e', 'p</text><script>alert(3)</script>', 'NPL<u>&\"']" \
   "cluster, partition, submitter and unit show as text in the cells"
is "$(sed -n 's/^bdi //p' "$work/hostile.txt")" "[$name]" \
   "the name is isolated (bdi): its right-to-left override does not turn the heading's month around"
is "$(sed -n 's/^title //p' "$work/hostile.txt")" "'Statement \u2068${name:1:-1}\u2069 2025-05'" \
   "and the page's title isolates it between U+2068 and U+2069 (no element may mark it there)"
# --all: a name longer than a file name may be does not stop the run
mkdir "$work/hostile"
"$report" -d hpcacct_hostile --all -o "$work/hostile" 2025-05 2>"$work/report.err"; rc=$?
is "$rc $(ls "$work/hostile" | wc -l) $(ls "$work/hostile" | awk 'length($0) > 255' | wc -l)" "0 3 0" \
   "--all writes every statement when a name's file name would be too long (exit, files, names over 255 bytes)"
[ -f "$work/hostile/%C5%BE-after-2025-05.html" ]; ok $? "the account after the long one (ž-after) has its statement" \
   "$(ls "$work/hostile"; cat "$work/report.err")"
