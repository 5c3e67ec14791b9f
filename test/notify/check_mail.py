#!/usr/bin/python3
"""check_mail.py MAILDIR EXPECTED.json: the messages the SMTP sink wrote, read as a mail reader
reads them (Python's email package), against the outbox. EXPECTED is a JSON array of
{id, to, subject, name, body (hex of the UTF-8 bytes)}, one per delivery. Prints one line per
check: "0|description" or "1|description|what differs". Test use only (test/notify/run.sh).
The display name is decoded as RFC 2047 6.2 says, ignoring the white space between adjacent
encoded words: Python 3.11's address parser keeps it (CPython gh-128110)."""
import binascii, email, email.header, email.policy, glob, json, re, sys

maildir, expected_file = sys.argv[1], sys.argv[2]
expected = json.load(open(expected_file, encoding='utf-8'))
arrived = {}
for path in glob.glob(maildir + '/*.eml'):
    raw = open(path, 'rb').read()
    head = raw.split(b'\r\n\r\n', 1)[0]
    mid = re.search(rb'^X-Hpcacct-Message: (\d+)\r?$', head, re.M | re.I)
    rcpt = re.search(rb'^X-Envelope-To: (\S+)\r?$', head, re.M | re.I)
    if mid and rcpt:
        arrived[(mid.group(1).decode(), rcpt.group(1).decode())] = raw

problems = {k: [] for k in ('arrived', 'lines', 'words', 'subject', 'name', 'body', 'defects')}
encodings = {}
ENCODED_WORD = re.compile(rb'=\?([^?]+)\?([BbQq])\?([^?]*)\?=')
for e in expected:
    key = (str(e['id']), e['to'])
    raw = arrived.get(key)
    label = '%s to %s' % key
    if raw is None:
        problems['arrived'].append(label)
        continue
    head, _, body = raw.partition(b'\r\n\r\n')
    # header lines at most 78 characters (the sink's own first line aside), body lines at
    # most 998 bytes (RFC 5322), no bare CR or LF anywhere
    for i, line in enumerate(raw.split(b'\r\n')):
        limit = 998 if i > head.count(b'\r\n') else 78
        if len(line) > limit or b'\r' in line or b'\n' in line:
            problems['lines'].append('%s: line %d has %d bytes: %r' % (label, i + 1, len(line), line[:90]))
    # every encoded word at most 75 characters and whole UTF-8 characters on its own
    for w in ENCODED_WORD.finditer(head):
        text = w.group(3)
        try:
            if w.group(2) in b'Bb':
                data = binascii.a2b_base64(text)
            else:
                data = binascii.a2b_qp(text.replace(b'_', b' '), header=True)
            data.decode('utf-8')
            if len(w.group(0)) > 75:
                raise ValueError('%d characters' % len(w.group(0)))
        except ValueError as x:
            problems['words'].append('%s: %r: %s' % (label, w.group(0), x))
    msg = email.message_from_bytes(raw, policy=email.policy.default)
    if str(msg['Subject']) != e['subject']:
        problems['subject'].append('%s: got %r, want %r' % (label, str(msg['Subject']), e['subject']))
    to = msg['To'].addresses
    value = re.sub(r'\r\n(?=[ \t])', '', re.search(r'^To: ([^\r\n]*(?:\r\n[ \t][^\r\n]*)*)', head.decode('ascii'), re.M).group(1))
    phrase = value.rpartition(' <')[0] if value.endswith('>') and ' <' in value else ''
    if phrase.startswith('"'):
        name = re.sub(r'\\(.)', r'\1', phrase[1:-1])
    else:
        name = str(email.header.make_header(email.header.decode_header(phrase))) if phrase else ''
    if len(to) != 1 or name != e['name'] or to[0].addr_spec != e['to']:
        problems['name'].append('%s: got %r, want %r' % (label, [(name, a.addr_spec) for a in to],
                                                           (e['name'], e['to'])))
    cte = str(msg['Content-Transfer-Encoding']).lower()
    encodings[cte] = encodings.get(cte, 0) + 1
    payload = msg.get_payload(decode=True)
    # text/plain's line break is CRLF on the wire: the outbox's is LF
    got = payload.replace(b'\r\n', b'\n')
    want = bytes.fromhex(e['body'])
    if got != want:
        at = next((i for i in range(min(len(got), len(want))) if got[i] != want[i]), min(len(got), len(want)))
        problems['body'].append('%s (%s): differs at byte %d of %d/%d: got %r, want %r'
                                % (label, cte, at, len(got), len(want), got[at - 10:at + 30], want[at - 10:at + 30]))
    defects = list(msg.defects) + [d for h in ('Subject', 'To') for d in msg[h].defects]
    if defects:
        problems['defects'].append('%s: %s' % (label, defects))

n = len(expected)
checks = [('arrived', 'all %d deliveries arrived' % n),
          ('lines', 'every header line is at most 78 characters, every body line at most 998 bytes, CRLF only'),
          ('words', 'every encoded word is at most 75 characters and whole UTF-8 characters'),
          ('subject', 'each decoded Subject is the outbox subject'),
          ('name', 'each decoded To is the contact\'s display name and address'),
          ('body', 'each decoded body is the outbox body, byte for byte (%s)'
                   % ', '.join('%s: %d' % kv for kv in sorted(encodings.items()))),
          ('defects', 'the mail reader finds no defect in any message')]
for key, desc in checks:
    bad = problems[key]
    print('%d|%s|%s' % (1 if bad else 0, desc, '\\n'.join(bad[:5]).replace('|', '!')))
