#!/usr/bin/python3
"""SMTP sink for test/notify/run.sh: accepts every message on 127.0.0.1:PORT and writes it,
once per envelope recipient, to DIR/<n>.eml (first line "X-Envelope-To: <rcpt>"); --auth
requires a login, --refuse answers RCPT TO of an address with 550, --defer with 450,
--defer-data the final "." of a message containing a text with 451 (nothing kept), --tls
requires STARTTLS, --no-smtputf8 does not offer SMTPUTF8 (a message sent with it gets a line
"X-Envelope-SMTPUTF8: yes" after the first). The file
is written before the server answers the final ".": from then on the server "has" it, as
a real MTA would. --delay waits before that answer, so that a sender killed in between
leaves a message the server has but the sender never heard of. Test use only."""
import argparse, asyncio, itertools, os, signal, ssl, threading, time
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

parser = argparse.ArgumentParser()
parser.add_argument('--port', type=int, required=True)
parser.add_argument('--dir', required=True)
parser.add_argument('--delay', type=float, default=0.0)
parser.add_argument('--auth', help='LOGIN:PASSWORD: require AUTH (without TLS: test use only)')
parser.add_argument('--refuse', action='append', default=[], help='answer RCPT TO of this address with 550')
parser.add_argument('--defer', action='append', default=[], help='answer RCPT TO of this address with 450')
parser.add_argument('--defer-data', action='append', default=[],
                    help='answer the final "." of a message containing this text with 451 (nothing kept)')
parser.add_argument('--no-smtputf8', action='store_true', help='do not offer SMTPUTF8 (RFC 6531)')
parser.add_argument('--tls', nargs=2, metavar=('CERT', 'KEY'), help='offer and require STARTTLS with this certificate')
args = parser.parse_args()
counter = itertools.count(1)
lock = threading.Lock()

class Sink:
    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        if address in args.refuse:
            return '550 5.1.1 No such user here'
        if address in args.defer:
            return '450 4.2.2 Mailbox full, try later'
        envelope.rcpt_tos.append(address)
        return '250 OK'

    async def handle_DATA(self, server, session, envelope):
        data = envelope.original_content or envelope.content
        if isinstance(data, str):
            data = data.encode('utf-8')
        if any(t.encode('utf-8') in data for t in args.defer_data):
            return '451 4.3.0 Temporary failure, try again later'
        for rcpt in envelope.rcpt_tos:
            with lock:
                n = next(counter)
            tmp = os.path.join(args.dir, '.%d-%d.tmp' % (os.getpid(), n))
            with open(tmp, 'wb') as f:
                f.write(b'X-Envelope-To: ' + rcpt.encode() + b'\r\n'
                        + (b'X-Envelope-SMTPUTF8: yes\r\n' if envelope.smtp_utf8 else b'') + data)
            os.rename(tmp, os.path.join(args.dir, '%d-%06d.eml' % (os.getpid(), n)))
        if args.delay:
            await asyncio.sleep(args.delay)
        return '250 Message accepted'

def authenticator(server, session, envelope, mechanism, auth_data):
    ok = (args.auth is not None and isinstance(auth_data, LoginPassword)
          and auth_data.login.decode() + ':' + auth_data.password.decode() == args.auth)
    return AuthResult(success=ok, handled=False)  # handled=False: a failure answers 535

extra = {}
if args.auth:
    extra = dict(authenticator=authenticator, auth_required=True, auth_require_tls=False)
if args.tls:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(*args.tls)
    extra.update(tls_context=context, require_starttls=True)
if args.no_smtputf8:
    extra.update(enable_SMTPUTF8=False)  # aiosmtpd's Controller offers it by default
controller = Controller(Sink(), hostname='127.0.0.1', port=args.port, **extra)
controller.start()
stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *a: stop.set())
signal.signal(signal.SIGINT, lambda *a: stop.set())
print('ready', flush=True)
while not stop.wait(0.5):
    pass
controller.stop()
