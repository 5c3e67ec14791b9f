// hpcacct-report: writes accounts' monthly statements, hpcacct.statement_html(account, month)
// (or account_month()'s jsonb with --json), to a file, a directory or standard output.
//
// Usage:
//   hpcacct-report [-d CONNINFO] [--json] [-o FILE] ACCOUNT MONTH
//   hpcacct-report [-d CONNINFO] [--json] --all -o DIRECTORY MONTH
// MONTH is YYYY-MM (a day, YYYY-MM-DD, names its month). Without -d, libpq's environment
// (PGHOST, PGDATABASE, PGUSER, ~/.pgpass, PGSERVICE, ...) chooses the database; -d takes a
// connection string or URI. --all writes one file per account hpcacct.statement_accounts()
// names for the month (those the caller may see that had charges, an allocation or a quota
// in it), as DIRECTORY/ACCOUNT-YYYY-MM.html (.json), all from one snapshot of the database.
// Files are written whole or not at all (a temporary file renamed into place).
// Exit status: 0 written; 1 the database refused (an unknown or invisible account, a month
// that has not begun: the message names the SQLSTATE), the connection failed, or a file
// could not be written; 2 a usage error.

#include "core/calendar.hpp"
#include "pq.hpp"

#include <libpq-fe.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

const char *const usage_text =
    "usage: hpcacct-report [-d CONNINFO] [--json] [-o FILE] ACCOUNT MONTH\n"
    "       hpcacct-report [-d CONNINFO] [--json] --all -o DIRECTORY MONTH\n"
    "MONTH is YYYY-MM; without -d, libpq's environment (PGHOST, PGDATABASE, ...) names the database.\n";

struct UsageError : std::runtime_error {
    using std::runtime_error::runtime_error;
};
struct Failure : std::runtime_error {
    using std::runtime_error::runtime_error;
};

struct Options {
    std::string conninfo;
    std::string output;  // a file (one account), a directory (--all); empty: standard output
    std::string account;
    std::string month;   // YYYY-MM-01
    bool all = false;
    bool json = false;
};

// YYYY-MM or YYYY-MM-DD (a day of that month), year 0001 on, month 01-12: the first day
// of the month, or a usage error.
std::string first_of_month(const std::string &text) {
    auto digits = [&](size_t from, size_t n) {
        for (size_t i = from; i < from + n; ++i)
            if (i >= text.size() || text[i] < '0' || text[i] > '9') return false;
        return true;
    };
    bool with_day = text.size() == 10 && text[7] == '-' && digits(8, 2);
    bool shape = (text.size() == 7 || with_day) && digits(0, 4) && text[4] == '-' && digits(5, 2);
    int year = shape ? std::stoi(text.substr(0, 4)) : 0;
    int month = shape ? std::stoi(text.substr(5, 2)) : 0;
    bool valid = shape && year >= 1 && month >= 1 && month <= 12;
    if (valid && with_day) {
        int day = std::stoi(text.substr(8, 2));
        valid = day >= 1 && day <= hpcacct::calendar::days_in_month(year, month);
    }
    if (!valid)
        throw UsageError("the month must be YYYY-MM (e.g. 2025-05), not \"" + text + "\"");
    return text.substr(0, 7) + "-01";
}

Options parse(int argc, char **argv) {
    Options o;
    std::vector<std::string> positional;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto value = [&](const char *name) {
            if (i + 1 >= argc) throw UsageError(std::string(name) + " needs a value");
            return std::string(argv[++i]);
        };
        if (a == "-d" || a == "--dbname") o.conninfo = value("-d");
        else if (a == "-o" || a == "--output") o.output = value("-o");
        else if (a == "--all") o.all = true;
        else if (a == "--json") o.json = true;
        else if (a == "-h" || a == "--help") throw UsageError("");
        else if (a.size() > 1 && a[0] == '-') throw UsageError("unknown option \"" + a + "\"");
        else positional.push_back(a);
    }
    if (o.all) {
        if (positional.size() != 1) throw UsageError("--all takes one argument, the month");
        if (o.output.empty()) throw UsageError("--all needs -o DIRECTORY");
        o.month = first_of_month(positional[0]);
    } else {
        if (positional.size() != 2) throw UsageError("an account and a month are needed");
        if (positional[0].empty()) throw UsageError("the account must not be empty");
        o.account = positional[0];
        o.month = first_of_month(positional[1]);
    }
    return o;
}

// ---- the database ----------------------------------------------------------------------

using hpcacct::pq::Result;

struct Db {
    PGconn *conn = nullptr;
    explicit Db(const std::string &conninfo) {
        // dbname may be a connection string or URI; whatever it leaves out comes from libpq's
        // environment, as for psql. UTF-8 whatever PGCLIENTENCODING says: the statements are
        // UTF-8 (<meta charset="utf-8">, JSON) and so is the account named on the command line.
        const char *keys[] = {"dbname", "fallback_application_name", "client_encoding", nullptr};
        const char *values[] = {conninfo.empty() ? nullptr : conninfo.c_str(), "hpcacct-report", "UTF8", nullptr};
        conn = PQconnectdbParams(keys, values, 1);
        if (PQstatus(conn) != CONNECTION_OK) {
            const std::string msg = hpcacct::pq::one_line(PQerrorMessage(conn));
            PQfinish(conn);
            conn = nullptr;
            throw Failure("cannot connect to the database: " + msg);
        }
        hpcacct::pq::prefix_notices(conn, "hpcacct-report");
        const std::string error = hpcacct::pq::set_session_format(conn);
        if (!error.empty()) {
            PQfinish(conn);
            conn = nullptr;
            throw Failure("cannot set the session's formatting: " + error);
        }
    }
    ~Db() {
        if (conn) PQfinish(conn);
    }
    Db(const Db &) = delete;
    Db &operator=(const Db &) = delete;

    Result exec(const char *sql, const std::vector<std::string> &params = {}) {
        Result r = hpcacct::pq::exec(conn, sql, params);
        if (!hpcacct::pq::succeeded(r.get())) throw Failure(hpcacct::pq::describe(r.get()));
        return r;
    }
};

// ---- output ----------------------------------------------------------------------------

// An account name as a file name: letters, digits, '.', '_' and '-' as they are (a leading
// '.' escaped), every other byte as %XX, so that no name can leave the directory. An encoding
// over 200 bytes is cut to 183 and ends in '~' and the 64-bit FNV-1a hash of the whole name in
// hex ('~' is otherwise always %7E): with the suffix and the temporary name's, it stays under
// the 255 bytes a file name may have, and one long name does not stop an --all run.
std::string file_name_of(const std::string &account) {
    std::string out;
    for (size_t i = 0; i < account.size(); ++i) {
        unsigned char c = static_cast<unsigned char>(account[i]);
        bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                     c == '-' || (c == '.' && i > 0);
        if (plain) {
            out += static_cast<char>(c);
        } else {
            char hex[4];
            std::snprintf(hex, sizeof hex, "%%%02X", c);
            out += hex;
        }
    }
    if (out.size() <= 200) return out;
    std::size_t cut = 183;
    while (cut > 0 && (out[cut - 1] == '%' || (cut > 1 && out[cut - 2] == '%'))) --cut;  // no %XX split
    std::uint64_t h = 14695981039346656037ull;
    for (unsigned char c : account) h = (h ^ c) * 1099511628211ull;
    char hex[18];
    std::snprintf(hex, sizeof hex, "~%016llx", static_cast<unsigned long long>(h));
    return out.substr(0, cut) + hex;
}

// Writes the whole text to path through a temporary file in the same directory, renamed into
// place: a reader never sees half a statement, and a failure leaves no file behind. The
// temporary file is created afresh (mkstemp), never opened through what another user put at
// a guessable name; it gets the mode a plain create would (0666 less the umask).
void write_file(const std::string &path, const std::string &text) {
    std::vector<char> name(path.begin(), path.end());
    const char suffix[] = ".tmp.XXXXXX";
    name.insert(name.end(), suffix, suffix + sizeof suffix);  // with the terminating NUL
    int fd = mkstemp(name.data());
    if (fd < 0) throw Failure("cannot write " + path + ": " + std::strerror(errno));
    const std::string tmp(name.data());
    const mode_t mask = umask(0);
    umask(mask);
    FILE *f = fchmod(fd, 0666 & ~mask) == 0 ? fdopen(fd, "wb") : nullptr;
    if (!f) {
        int err = errno;
        close(fd);
        std::remove(tmp.c_str());
        throw Failure("cannot write " + path + ": " + std::strerror(err));
    }
    bool good = std::fwrite(text.data(), 1, text.size(), f) == text.size();
    good = (std::fclose(f) == 0) && good;
    if (!good || std::rename(tmp.c_str(), path.c_str()) != 0) {
        int err = errno;
        std::remove(tmp.c_str());
        throw Failure("cannot write " + path + ": " + std::strerror(err));
    }
}

int run(int argc, char **argv) {
    Options o = parse(argc, argv);
    if (o.all) {
        struct stat st;
        if (stat(o.output.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
            throw Failure("-o " + o.output + " is not a directory");
    }
    Db db(o.conninfo);
    // one snapshot for every statement of a run, and nothing written to the database
    db.exec("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY");
    const char *render = o.json ? "SELECT hpcacct.account_month($1, $2::date)::text"
                                : "SELECT hpcacct.statement_html($1, $2::date)";
    std::vector<std::string> accounts;
    if (o.all) {
        Result r = db.exec("SELECT a FROM hpcacct.statement_accounts($1::date) a", {o.month});
        for (int i = 0; i < PQntuples(r.get()); ++i) accounts.emplace_back(PQgetvalue(r.get(), i, 0));
    } else {
        accounts.push_back(o.account);
    }
    const std::string suffix = o.month.substr(0, 7) + (o.json ? ".json" : ".html");
    for (const std::string &account : accounts) {
        Result r = db.exec(render, {account, o.month});
        std::string text = PQgetvalue(r.get(), 0, 0);
        text += '\n';
        if (o.all) {
            write_file(o.output + "/" + file_name_of(account) + "-" + suffix, text);
        } else if (!o.output.empty()) {
            write_file(o.output, text);
        } else if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size() || std::fflush(stdout) != 0) {
            throw Failure(std::string("cannot write to standard output: ") + std::strerror(errno));
        }
    }
    db.exec("COMMIT");
    if (o.all)
        std::fprintf(stderr, "hpcacct-report: %zu statement%s for %s written to %s\n", accounts.size(),
                     accounts.size() == 1 ? "" : "s", o.month.substr(0, 7).c_str(), o.output.c_str());
    return 0;
}

}  // namespace

int main(int argc, char **argv) {
    hpcacct::pq::keep_standard_streams();
    try {
        return run(argc, argv);
    } catch (const UsageError &e) {
        if (*e.what()) std::fprintf(stderr, "hpcacct-report: %s\n", e.what());
        std::fputs(usage_text, *e.what() ? stderr : stdout);
        return *e.what() ? 2 : 0;
    } catch (const std::exception &e) {
        std::fprintf(stderr, "hpcacct-report: %s\n", e.what());
        return 1;
    }
}
