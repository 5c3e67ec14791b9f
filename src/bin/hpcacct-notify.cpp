// hpcacct-notify: delivers the messages of hpcacct's outbox over SMTP.
//
// Protocol (functions in sql/install/95_notify.sql):
//   1. hpcacct.outbox_claim(worker, lease, batch) leases due deliveries to this process, one
//      per message and mailbox (users who share an address get one copy; steps 2 and 3 record
//      it on each of their deliveries);
//   2. one SMTP transaction per delivery (one RCPT). Once the server has accepted DATA, and
//      before libcurl gets the last bytes of the body (after which it sends the final "." that
//      completes the transaction), hpcacct.outbox_sending() commits the state 'sending';
//   3. hpcacct.outbox_result() records delivered / retry (back-off) / failed / uncertain.
// Messages to a mailbox go in the order written: outbox_claim() holds back a newer one while
// an older one to the same mailbox is to be retried (up to the setting notify_order_wait).
// A delivery left in 'sending' (this process killed, the database gone) becomes 'uncertain'
// once its lease runs out and is never sent again by itself: nothing is sent twice. Every
// failure before step 2 is known not to have delivered anything and is retried.
//
// Configuration: --config FILE (lines "key = value", # comments) and the environment
// (HPCACCT_NOTIFY_<KEY>, which wins). Keys: conninfo, smtp_host, smtp_port, smtp_tls (none,
// starttls, require_starttls, smtps), smtp_user, smtp_password, smtp_cainfo, from, domain,
// lease, batch, retry_base, retry_max, poll, timeout, worker.
// Usage: hpcacct-notify [--config FILE] [--once]
//   --once: deliver what is due now and exit (cron); otherwise run, woken by NOTIFY
//   hpcacct_outbox and by the next retry, until SIGTERM or SIGINT.
// The database login: a member of hpcacct_notify (setup_roles()), which may run the four
// functions above and read what they return, and nothing else; not hpcacct_admin.

#include "core/idna.hpp"
#include "core/mail.hpp"
#include "pq.hpp"

#include <curl/curl.h>
#include <libpq-fe.h>

#include <fcntl.h>
#include <sys/select.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

// SIGTERM or SIGINT: stop. The handler also writes a byte to a pipe that every wait selects
// on, so a signal that comes just before a wait cannot be missed until its timeout.
volatile std::sig_atomic_t stop_requested = 0;
int stop_pipe[2] = {-1, -1};
extern "C" void on_signal(int) {
    const int saved_errno = errno;
    stop_requested = 1;
    if (stop_pipe[1] >= 0) {
        const ssize_t written = write(stop_pipe[1], "x", 1);  // full or failed: a byte is already there
        (void)written;
    }
    errno = saved_errno;
}

// Waits up to `seconds` for the socket fd (none if -1) to be readable or, unless told not to,
// for a stop; true when the socket is readable.
bool wait_readable(int fd, double seconds, bool or_stop = true) {
    fd_set set;
    FD_ZERO(&set);
    if (or_stop) FD_SET(stop_pipe[0], &set);
    if (fd >= 0) FD_SET(fd, &set);
    struct timeval tv;
    tv.tv_sec = static_cast<long>(seconds);
    tv.tv_usec = static_cast<long>((seconds - static_cast<double>(tv.tv_sec)) * 1e6);
    return select(std::max(fd, stop_pipe[0]) + 1, &set, nullptr, nullptr, &tv) > 0 && fd >= 0 && FD_ISSET(fd, &set);
}

struct ConfigError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

std::string trim(const std::string &s) {
    const char *ws = " \t\r\n";
    auto b = s.find_first_not_of(ws);
    if (b == std::string::npos) return "";
    auto e = s.find_last_not_of(ws);
    return s.substr(b, e - b + 1);
}

// A domain's A-label, as the database's mailbox_key() reads it (src/core/idna.hpp).
using hpcacct::mail::idna_to_ascii;

struct Config {
    std::map<std::string, std::string> values{
        {"conninfo", ""},          {"smtp_host", "localhost"}, {"smtp_port", "25"},
        {"smtp_tls", "starttls"},  {"smtp_user", ""},          {"smtp_password", ""},
        {"smtp_cainfo", ""},       {"from", ""},               {"domain", ""},
        {"lease", "600"},          {"batch", "10"},            {"retry_base", "60"},
        {"retry_max", "3600"},     {"poll", "60"},             {"timeout", "30"},
        {"worker", ""}};

    const std::string &get(const std::string &k) const { return values.at(k); }
    long number(const std::string &k) const {
        const std::string &v = get(k);
        char *end = nullptr;
        errno = 0;
        long n = std::strtol(v.c_str(), &end, 10);
        // at most 2^31 - 1: products and select()'s arguments stay in range;
        // timeout at most what libcurl takes (it ignores a larger one: no timeout at all)
        const long most = k == "timeout" ? 2147483L : 2147483647L;
        if (v.empty() || *end != '\0' || errno != 0 || n <= 0 || n > most)
            throw ConfigError(k + " must be a whole number of " +
                              (k == "batch" ? std::string("deliveries") : std::string("seconds")) + " from 1 to " +
                              std::to_string(most) + ", not \"" + v + "\"");
        return n;
    }
    void set(const std::string &k, const std::string &v, const std::string &where) {
        if (!values.count(k)) throw ConfigError(where + ": unknown setting \"" + k + "\"");
        values[k] = v;
    }
    void read_file(const std::string &path) {
        std::ifstream in(path);
        if (!in) throw ConfigError("cannot read the configuration file " + path);
        std::string line;
        int n = 0;
        while (std::getline(in, line)) {
            ++n;
            std::string t = trim(line);
            if (t.empty() || t[0] == '#') continue;
            auto eq = t.find('=');
            if (eq == std::string::npos)
                throw ConfigError(path + ":" + std::to_string(n) + ": expected \"key = value\"");
            set(trim(t.substr(0, eq)), trim(t.substr(eq + 1)), path + ":" + std::to_string(n));
        }
    }
    void read_environment() {
        for (auto &kv : values) {
            std::string name = "HPCACCT_NOTIFY_";
            for (char c : kv.first) name += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
            if (const char *v = std::getenv(name.c_str())) kv.second = v;
        }
    }
    void check() {
        const std::string &from = get("from");
        if (from.empty() || from.find('@') == std::string::npos ||
            from.find_first_of(" \t\r\n<>,;\"") != std::string::npos)
            throw ConfigError("from must be the sender's address (e.g. hpc-accounting@example.org), not \"" + from + "\"");
        hpcacct::mail::Envelope sender = hpcacct::mail::envelope(from, idna_to_ascii);
        if (sender.error.empty() && !hpcacct::mail::host_name(sender.address.substr(sender.address.rfind('@') + 1)))
            sender.error = "its domain is not a host name (labels of letters, digits and hyphens, separated by single dots)";
        if (!sender.error.empty() || sender.needs_smtputf8)
            throw ConfigError("from must be an address with an ASCII local part (its domain may be internationalized), not \"" +
                              from + "\"" + (sender.error.empty() ? "" : ": " + sender.error));
        values["from"] = sender.address;  // an internationalized domain as its A-label
        if (get("domain").empty()) values["domain"] = sender.address.substr(sender.address.rfind('@') + 1);
        else {
            // the right-hand side of the Message-ID: an internationalized domain as its A-label
            hpcacct::mail::Envelope id = hpcacct::mail::envelope("id@" + get("domain"), idna_to_ascii);
            if (!id.error.empty() || !hpcacct::mail::host_name(id.address.substr(3)))
                throw ConfigError("domain must be a domain name (an internationalized one with an IDNA A-label), not \"" +
                                  get("domain") + "\"");
            values["domain"] = id.address.substr(3);
        }
        const std::string &tls = get("smtp_tls");
        if (tls != "none" && tls != "starttls" && tls != "require_starttls" && tls != "smtps")
            throw ConfigError("smtp_tls must be none, starttls, require_starttls or smtps, not \"" + tls + "\"");
        for (const char *k : {"lease", "batch", "retry_base", "retry_max", "poll", "timeout"}) number(k);
        long port = number("smtp_port");
        if (port > 65535) throw ConfigError("smtp_port must be at most 65535");
        if (number("timeout") * number("batch") >= number("lease"))
            throw ConfigError("lease must exceed timeout x batch, or a slow batch outlives its lease");
        if (get("worker").empty()) {
            char host[256] = {0};
            gethostname(host, sizeof host - 1);
            values["worker"] = std::string(host) + ":" + std::to_string(getpid());
        }
    }
};

void log_line(const std::string &s) {
    std::fprintf(stderr, "hpcacct-notify: %s\n", s.c_str());
    std::fflush(stderr);
}

// ---- the database ----------------------------------------------------------------------

struct Db {
    PGconn *conn = nullptr;
    ~Db() { close(); }
    void close() {
        if (conn) PQfinish(conn);
        conn = nullptr;
    }
    bool ok() const { return conn && PQstatus(conn) == CONNECTION_OK; }
    bool connect(const std::string &conninfo) {
        close();
        // conninfo: a connection string or URI, the rest from libpq's environment. UTF-8 whatever
        // PGCLIENTENCODING says: mail is composed as UTF-8. An application_name given is kept.
        const char *keys[] = {"dbname", "fallback_application_name", "client_encoding", nullptr};
        const char *values[] = {conninfo.empty() ? nullptr : conninfo.c_str(), "hpcacct-notify", "UTF8", nullptr};
        conn = PQconnectdbParams(keys, values, 1);
        if (PQstatus(conn) != CONNECTION_OK) {
            log_line("database: " + hpcacct::pq::one_line(PQerrorMessage(conn)));
            close();
            return false;
        }
        hpcacct::pq::prefix_notices(conn, "hpcacct-notify");
        const std::string error = hpcacct::pq::set_session_format(conn);
        if (!error.empty()) {
            log_line("database: cannot set the session's formatting: " + error);
            close();
            return false;
        }
        PGresult *r = PQexec(conn, "LISTEN hpcacct_outbox");
        bool good = PQresultStatus(r) == PGRES_COMMAND_OK;
        const std::string listen_error = good ? "" : hpcacct::pq::describe(r);
        PQclear(r);
        if (!good) {
            log_line("LISTEN: " + listen_error);
            close();
        }
        return good;
    }
    // Runs a parameterized statement; returns the result or nullptr (logged) on error.
    hpcacct::pq::Result exec(const char *sql, const std::vector<std::string> &params) {
        return checked(hpcacct::pq::exec(conn, sql, params));
    }
    // The same for a statement that leaves nothing to record when abandoned (a claim, the next
    // due time): a stop cancels it on the server instead of waiting for it, behind a lock say.
    // The statements that record a delivery are waited for: abandoned, a delivered one would
    // become uncertain.
    hpcacct::pq::Result exec_or_stop(const char *sql, const std::vector<std::string> &params) {
        if (stop_requested) return hpcacct::pq::Result(nullptr, PQclear);
        if (!hpcacct::pq::send(conn, sql, params)) return checked(hpcacct::pq::Result(nullptr, PQclear));
        bool cancel_sent = false;
        std::chrono::steady_clock::time_point give_up;
        while (PQisBusy(conn) && PQsocket(conn) >= 0) {
            const bool readable = wait_readable(PQsocket(conn), cancel_sent ? 1 : 60, !cancel_sent);
            if (stop_requested && !cancel_sent) {
                cancel_sent = true;
                give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
                char error[256] = {0};
                PGcancel *cancel = PQgetCancel(conn);
                if (!cancel || !PQcancel(cancel, error, sizeof error))
                    log_line("cannot cancel the statement: " + hpcacct::pq::one_line(error));
                PQfreeCancel(cancel);
            } else if (cancel_sent && std::chrono::steady_clock::now() > give_up) {
                log_line("the server has not ended the cancelled statement in 10 s: leaving it");
                return hpcacct::pq::Result(nullptr, PQclear);  // the caller closes the connection
            }
            if (readable && !PQconsumeInput(conn)) break;  // the connection is lost: PQgetResult says so
        }
        hpcacct::pq::Result r(PQgetResult(conn), PQclear);
        while (PGresult *more = PQgetResult(conn)) PQclear(more);
        return checked(std::move(r));
    }

  private:
    hpcacct::pq::Result checked(hpcacct::pq::Result r) {
        if (!hpcacct::pq::succeeded(r.get())) {
            log_line("database: " + (r ? hpcacct::pq::describe(r.get()) : hpcacct::pq::one_line(PQerrorMessage(conn))));
            r.reset();
        }
        return r;
    }
};

struct Delivery {
    std::string recipient_id, message_id, address, display_name, subject, body, date;
};

// ---- the message -------------------------------------------------------------------------

// Stable per message and recipient: a resend (by hand, after an 'uncertain') carries the same id.
std::string message_id_header(const Delivery &d, const Config &cfg) {
    return "<hpcacct." + d.message_id + "." + d.recipient_id + "@" + cfg.get("domain") + ">";
}

// Header and body as every server and reader takes them (src/core/mail.cpp).
// address: the recipient's as the envelope has it (hpcacct::mail::envelope).
std::string compose(const Delivery &d, const Config &cfg, const std::string &address) {
    hpcacct::mail::Message m;
    m.from = cfg.get("from");
    m.to_name = d.display_name;
    m.to_address = address;
    m.subject = d.subject;
    m.date = d.date;
    m.message_id = message_id_header(d, cfg);
    m.hpcacct_message = d.message_id;
    m.body = d.body;
    return hpcacct::mail::compose(m);
}

// ---- one SMTP transaction ----------------------------------------------------------------

using Trace = hpcacct::mail::SmtpTrace;  // one per libcurl handle, as its connection

extern "C" int on_debug(CURL *, curl_infotype type, char *data, size_t size, void *userdata) {
    try {
        if (type == CURLINFO_HEADER_IN || type == CURLINFO_HEADER_OUT)
            static_cast<Trace *>(userdata)->line(type == CURLINFO_HEADER_OUT, std::string_view(data, size));
    } catch (...) {
    }
    return 0;
}

extern "C" size_t discard(char *, size_t size, size_t nitems, void *) { return size * nitems; }

struct Upload {
    const std::string *data;
    size_t offset = 0;
    Db *db;
    const std::string *worker;
    const std::string *recipient_id;
    bool committed = false;  // 'sending' is committed: the server may get the message
    bool lease_lost = false;
    const Trace *trace = nullptr;
    bool needs_smtputf8 = false;
    bool no_smtputf8 = false;  // it needed SMTPUTF8 and MAIL FROM went without: stopped
};

size_t read_body_cpp(char *buffer, size_t size, size_t nitems, Upload *u) {
    size_t room = size * nitems;
    size_t left = u->data->size() - u->offset;
    size_t n = std::min(room, left);
    // The last bytes of the body: once libcurl has them it completes the transaction (the
    // final ".") without asking again. Commit 'sending' before handing them over, or abort
    // without them (the server then has an unfinished message and discards it).
    if (u->needs_smtputf8 && !u->trace->mail_smtputf8) {
        u->no_smtputf8 = true;  // before any byte of the message: nothing is completed
        return CURL_READFUNC_ABORT;
    }
    if (n == left && !u->committed) {
        auto r = u->db->exec("SELECT hpcacct.outbox_sending($1, $2)", {*u->worker, *u->recipient_id});
        if (!r || PQntuples(r.get()) != 1 || std::strcmp(PQgetvalue(r.get(), 0, 0), "t") != 0) {
            u->lease_lost = static_cast<bool>(r);
            return CURL_READFUNC_ABORT;
        }
        u->committed = true;
    }
    std::memcpy(buffer, u->data->data() + u->offset, n);
    u->offset += n;
    return n;
}

// libcurl's callback: no C++ exception may cross libcurl's C frames.
extern "C" size_t read_body(char *buffer, size_t size, size_t nitems, void *userdata) {
    try {
        return read_body_cpp(buffer, size, nitems, static_cast<Upload *>(userdata));
    } catch (...) {
        return CURL_READFUNC_ABORT;  // before 'sending' was committed: nothing is completed
    }
}

struct Outcome {
    std::string state;  // delivered, retry, failed, uncertain, or "" (lease lost: leave it)
    std::string error;
    bool this_recipient = false;  // a retry for this recipient only (4xx to RCPT): go on
};

// The options every transaction with the server shares.
void set_server(CURL *curl, const Config &cfg, char *errbuf, Trace *trace) {
    const std::string &tls = cfg.get("smtp_tls");
    std::string url = (tls == "smtps" ? "smtps://" : "smtp://") + cfg.get("smtp_host") + ":" + cfg.get("smtp_port") +
                      "/" + cfg.get("domain");
    curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
    curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, cfg.number("timeout"));
    curl_easy_setopt(curl, CURLOPT_TIMEOUT, cfg.number("timeout"));
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl, CURLOPT_USE_SSL, tls == "none"               ? static_cast<long>(CURLUSESSL_NONE)
                                            : tls == "starttls"          ? static_cast<long>(CURLUSESSL_TRY)
                                                                         : static_cast<long>(CURLUSESSL_ALL));
    if (!cfg.get("smtp_user").empty()) {
        curl_easy_setopt(curl, CURLOPT_USERNAME, cfg.get("smtp_user").c_str());
        curl_easy_setopt(curl, CURLOPT_PASSWORD, cfg.get("smtp_password").c_str());
    }
    if (!cfg.get("smtp_cainfo").empty()) curl_easy_setopt(curl, CURLOPT_CAINFO, cfg.get("smtp_cainfo").c_str());
    curl_easy_setopt(curl, CURLOPT_DEBUGFUNCTION, on_debug);
    curl_easy_setopt(curl, CURLOPT_DEBUGDATA, trace);
    curl_easy_setopt(curl, CURLOPT_VERBOSE, 1L);  // the debug callback's condition; it prints nothing
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, discard);
}

std::string describe(CURLcode rc, const char *errbuf, long code) {
    return std::string(curl_easy_strerror(rc)) + (errbuf[0] ? std::string(": ") + errbuf : "") +
           (code ? " (SMTP " + std::to_string(code) + ")" : "");
}

Outcome send_one(CURL *curl, Trace &trace, Db &db, const Config &cfg, const Delivery &d) {
    hpcacct::mail::Envelope env = hpcacct::mail::envelope(d.address, idna_to_ascii);
    if (!env.error.empty()) return {"failed", env.error + "; nothing was sent"};
    char errbuf[CURL_ERROR_SIZE] = {0};
    if (env.needs_smtputf8) {
        // Ask the server (EHLO, then NOOP) before MAIL: a local part that is not ASCII goes
        // only with SMTPUTF8, and is never sent raw to a server that did not offer it.
        set_server(curl, cfg, errbuf, &trace);
        curl_easy_setopt(curl, CURLOPT_UPLOAD, 0L);
        curl_easy_setopt(curl, CURLOPT_MAIL_RCPT, nullptr);
        curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, "NOOP");
        CURLcode rc = curl_easy_perform(curl);
        long code = 0;
        curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &code);
        curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, nullptr);
        if (rc != CURLE_OK) return {"retry", describe(rc, errbuf, code)};
        if (!trace.smtputf8_offered)
            return {"failed", "the local part of " + d.address + " is not ASCII and the server does not offer SMTPUTF8 "
                              "(RFC 6531); nothing was sent", true};
        errbuf[0] = 0;
    }
    std::string message = compose(d, cfg, env.address);
    Upload up{&message, 0, &db, &cfg.get("worker"), &d.recipient_id};
    up.trace = &trace;
    up.needs_smtputf8 = env.needs_smtputf8;
    trace.mail_smtputf8 = false;
    std::string from = "<" + cfg.get("from") + ">";
    std::string to = "<" + env.address + ">";
    struct curl_slist *rcpt = curl_slist_append(nullptr, to.c_str());

    set_server(curl, cfg, errbuf, &trace);
    curl_easy_setopt(curl, CURLOPT_MAIL_FROM, from.c_str());
    curl_easy_setopt(curl, CURLOPT_MAIL_RCPT, rcpt);
    curl_easy_setopt(curl, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(curl, CURLOPT_READFUNCTION, read_body);
    curl_easy_setopt(curl, CURLOPT_READDATA, &up);

    CURLcode rc = curl_easy_perform(curl);
    long code = 0;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &code);
    curl_slist_free_all(rcpt);
    curl_easy_setopt(curl, CURLOPT_MAIL_RCPT, nullptr);

    std::string what = describe(rc, errbuf, code);
    if (rc == CURLE_OK) return {"delivered", ""};
    if (up.lease_lost)
        return {"", "not sent: the lease is no longer this sender's (it ran out, or the delivery was withdrawn or "
                    "moved to a new address)"};
    if (up.no_smtputf8)
        return {"failed", "the local part of " + d.address + " is not ASCII and MAIL FROM went without SMTPUTF8 "
                          "(RFC 6531); the message was not completed", true};
    if (!up.committed) {
        // Nothing reached the point of no return: the server has no message. Only a
        // permanent refusal of this recipient fails it; anything else (the server down, a
        // refused login or sender, TLS) is the server's or the configuration's and retried.
        bool at_rcpt = rc == CURLE_SEND_ERROR && std::strncmp(errbuf, "RCPT failed", 11) == 0;
        if (at_rcpt && code >= 500 && code < 600) return {"failed", what};
        // a mailbox full or greylisted: only this recipient waits
        if (at_rcpt && code >= 400 && code < 500) return {"retry", what, true};
        return {"retry", what};
    }
    // After 'sending': only an explicit answer to the final "." says it was not taken. The
    // server answered: a 4xx is this message's (the rest of the batch goes on).
    if (rc == CURLE_WEIRD_SERVER_REPLY && code >= 400 && code < 500) return {"retry", what, true};
    if (rc == CURLE_WEIRD_SERVER_REPLY && code >= 500 && code < 600) return {"failed", what};
    return {"uncertain", what};
}

// ---- the loop ----------------------------------------------------------------------------

const char *claim_sql =
    "SELECT c.recipient_id, c.message_id, c.address, coalesce(c.display_name, ''), c.subject, c.body, "
    "       pg_catalog.to_char(c.created_at AT TIME ZONE 'UTC', 'Dy, DD Mon YYYY HH24:MI:SS') || ' +0000' "
    "FROM hpcacct.outbox_claim($1, pg_catalog.make_interval(secs => $2::float8), $3::integer) c";

// Delivers everything due; returns false when the database failed.
bool deliver_due(Db &db, CURL *curl, Trace &trace, const Config &cfg, int &sent) {
    const std::string &worker = cfg.get("worker");
    while (!stop_requested) {
        auto r = db.exec_or_stop(claim_sql, {worker, cfg.get("lease"), cfg.get("batch")});
        if (!r) return false;
        int n = PQntuples(r.get());
        if (n == 0) return true;
        for (int i = 0; i < n && !stop_requested; ++i) {
            Delivery d{PQgetvalue(r.get(), i, 0), PQgetvalue(r.get(), i, 1), PQgetvalue(r.get(), i, 2),
                       PQgetvalue(r.get(), i, 3), PQgetvalue(r.get(), i, 4), PQgetvalue(r.get(), i, 5),
                       PQgetvalue(r.get(), i, 6)};
            Outcome o = send_one(curl, trace, db, cfg, d);
            if (o.state.empty()) {
                log_line("message " + d.message_id + " to " + d.address + ": " + o.error);
                continue;
            }
            auto done = db.exec(
                "SELECT hpcacct.outbox_result($1, $2, $3, NULLIF($4, ''), "
                "pg_catalog.make_interval(secs => $5::float8), pg_catalog.make_interval(secs => $6::float8))",
                {worker, d.recipient_id, o.state, o.error, cfg.get("retry_base"), cfg.get("retry_max")});
            log_line("message " + d.message_id + " to " + d.address + " " + message_id_header(d, cfg) + ": " +
                     o.state + (o.error.empty() ? "" : " (" + o.error + ")"));
            if (o.state == "delivered") ++sent;
            if (!done) return false;  // the lease runs out; a delivered one becomes uncertain, never resent
            if (o.state == "retry" && !o.this_recipient) {
                // the server is down or refuses: the rest of the batch would fare alike, so it
                // waits for its own back-off instead of its lease
                for (int j = i + 1; j < n; ++j) {
                    auto later = db.exec(
                        "SELECT hpcacct.outbox_result($1, $2, 'retry', $3, "
                        "pg_catalog.make_interval(secs => $4::float8), pg_catalog.make_interval(secs => $5::float8))",
                        {worker, PQgetvalue(r.get(), j, 0), "not tried: " + o.error, cfg.get("retry_base"),
                         cfg.get("retry_max")});
                    if (!later) return false;
                }
                return true;
            }
        }
    }
    return true;
}

// Seconds until the next pending delivery is due (bounded by poll).
double seconds_to_next(Db &db, const Config &cfg) {
    double poll = static_cast<double>(cfg.number("poll"));
    // a delivery that waits for an older message to its mailbox counts from when it may go
    auto r = db.exec_or_stop("SELECT EXTRACT(epoch FROM hpcacct.outbox_next_due() - pg_catalog.clock_timestamp())::float8",
                             {});
    if (!r || PQgetisnull(r.get(), 0, 0)) return poll;
    double s = std::atof(PQgetvalue(r.get(), 0, 0));
    return std::max(0.2, std::min(poll, s + 0.05));
}

// Until a NOTIFY, `seconds` or a stop.
void wait_for_work(Db &db, double seconds) {
    if (!wait_readable(PQsocket(db.conn), seconds)) return;
    PQconsumeInput(db.conn);
    while (PGnotify *n = PQnotifies(db.conn)) PQfreemem(n);
}

int run(int argc, char **argv) {
    Config cfg;
    bool once = false;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        if (a == "--once") once = true;
        else if (a == "--config" && i + 1 < argc) cfg.read_file(argv[++i]);
        else if (a == "--help" || a == "-h") {
            std::printf("usage: hpcacct-notify [--config FILE] [--once]\n"
                        "Delivers hpcacct's outbox over SMTP. Connect (conninfo) as a login in role hpcacct_notify,\n"
                        "created by CALL hpcacct.setup_roles(): it leases deliveries and records them, nothing else.\n");
            return 0;
        } else throw ConfigError("unknown argument \"" + a + "\" (usage: hpcacct-notify [--config FILE] [--once])");
    }
    cfg.read_environment();
    cfg.check();

    if (pipe2(stop_pipe, O_NONBLOCK | O_CLOEXEC) != 0) {
        log_line(std::string("cannot create a pipe: ") + std::strerror(errno));
        return 1;
    }
    std::signal(SIGTERM, on_signal);
    std::signal(SIGINT, on_signal);
    std::signal(SIGPIPE, SIG_IGN);
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        log_line("libcurl failed to initialize");
        return 1;
    }
    std::unique_ptr<CURL, void (*)(CURL *)> curl(curl_easy_init(), curl_easy_cleanup);
    if (!curl) {
        log_line("libcurl failed to initialize");
        return 1;
    }
    Trace trace;  // the handle's, as its connection
    Db db;
    int sent = 0;
    double backoff = 1;
    while (!stop_requested) {
        if (!db.ok() && !db.connect(cfg.get("conninfo"))) {
            if (once) return 2;
            wait_readable(-1, backoff);  // or a stop
            backoff = std::min(backoff * 2, static_cast<double>(cfg.number("poll")));
            continue;
        }
        bool good = deliver_due(db, curl.get(), trace, cfg, sent);
        if (!good) {
            db.close();
            if (stop_requested) break;  // the claim cancelled by the stop is no failure
            if (once) return 2;
            // a statement that failed (a grant revoked, the extension gone) fails again: wait as
            // after a failed connection, or it reconnects and fails as fast as it can
            wait_readable(-1, backoff);
            backoff = std::min(backoff * 2, static_cast<double>(cfg.number("poll")));
            continue;
        }
        backoff = 1;
        if (once || stop_requested) break;  // a signal during the deliveries: no wait of poll seconds
        wait_for_work(db, seconds_to_next(db, cfg));
    }
    log_line(std::to_string(sent) + " delivered" + (stop_requested ? "; stopped by a signal" : ""));
    curl.reset();
    curl_global_cleanup();
    return 0;
}

}  // namespace

int main(int argc, char **argv) {
    hpcacct::pq::keep_standard_streams();
    try {
        return run(argc, argv);
    } catch (const ConfigError &e) {
        log_line(std::string("configuration: ") + e.what());
        return 1;
    } catch (const std::exception &e) {
        log_line(std::string("error: ") + e.what());
        return 3;
    } catch (...) {
        log_line("unknown error");
        return 3;
    }
}
