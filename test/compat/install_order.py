#!/usr/bin/env python3
"""install_order.py: the parts of the install script (sql/install/*.sql, concatenated in name
order) must define every object before the first part that uses it. Every name the scripts
use is schema-qualified (@extschema@.name or hpcacct_internal.name), so a part's uses are
those names, and the part that defines one is the first with CREATE ... name. Prints a TAP
line per part, and appends "order passed failed" to $HPCACCT_TALLY when it is set."""
import glob, os, re, sys

os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..'))
# made at run time, not by a part: create_job_table() creates hpcacct.job
RUNTIME = {('@extschema@', 'job')}
KINDS = (r'FUNCTION|PROCEDURE|AGGREGATE|(?:UNLOGGED\s+)?TABLE|VIEW|MATERIALIZED\s+VIEW|TYPE|DOMAIN|SEQUENCE|'
         r'OPERATOR\s+CLASS|OPERATOR\s+FAMILY')
DEFINE = re.compile(r'\bCREATE\s+(?:OR\s+REPLACE\s+)?(' + KINDS + r')\s+(?:IF\s+NOT\s+EXISTS\s+)?'
                    r'(@extschema@|hpcacct_internal)\.([a-z_][a-z_0-9]*)', re.I)
USE = re.compile(r'(@extschema@|hpcacct_internal)\.([a-z_][a-z_0-9]*)')
COLUMN = re.compile(r'^\s+([a-z_][a-z_0-9]*)\s', re.M)

parts = [os.path.basename(p) for p in sorted(glob.glob('sql/install/*.sql'))]
defined, uses = {}, {}
for part in parts:
    text = re.sub(r'--[^\n]*', '', open('sql/install/' + part).read())
    for m in DEFINE.finditer(text):
        defined.setdefault((m.group(2), m.group(3)), part)
        if m.group(1).upper().endswith('TABLE'):
            # a table's identity and serial columns own a sequence TABLE_COLUMN_seq
            body = text[m.end():text.find(';', m.end())]
            for c in COLUMN.finditer(body):
                defined.setdefault((m.group(2), f'{m.group(3)}_{c.group(1)}_seq'), part)
    uses[part] = sorted({(m.group(1), m.group(2)) for m in USE.finditer(text)})

passed = failed = 0
for k, part in enumerate(parts):
    problems = []
    for name in uses[part]:
        where = defined.get(name)
        if where is None and name not in RUNTIME:
            problems.append(f'{name[0]}.{name[1]} is defined by no part')
        elif where is not None and parts.index(where) > k:
            problems.append(f'{name[0]}.{name[1]} is defined later, in {where}')
    if problems:
        failed += 1
        print(f'not ok - {part} uses only what it or an earlier part defines')
        for p in problems:
            print(f'    {p}')
    else:
        passed += 1
        print(f'ok - {part} uses only what it or an earlier part defines ({len(uses[part])} names)')
if os.environ.get('HPCACCT_TALLY'):
    with open(os.environ['HPCACCT_TALLY'], 'a') as tally:
        tally.write(f'order {passed} {failed}\n')
sys.exit(1 if failed else 0)
