// hpcacct-sacct: loads Slurm's accounting (sacct) into hpcacct.
//
//   hpcacct-sacct [-d CONNINFO] load FILE|-          sacct --parsable2 text with its header
//   hpcacct-sacct [-d CONNINFO] run [-M C1,C2] [--since TIME] [--overlap SECONDS]
//   hpcacct-sacct [-d CONNINFO] sync-accounts [FILE|-]
//
// Connects with libpq's usual environment (PGHOST, PGDATABASE, PGUSER, ...) or -d. Lines
// are streamed into hpcacct.sacct_staging with COPY and loaded by hpcacct.load_sacct() in one
// transaction. Exit status: 0 when loaded (quarantined lines included), 1 when it could not
// load, 2 on a usage error. No exception leaves main().
#include "core/error.hpp"
#include "core/sacct.hpp"
#include "pq.hpp"

#include <libpq-fe.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

namespace {

namespace sacct = hpcacct::sacct;

// A failure that stops the command: printed as "hpcacct-sacct: MESSAGE".
struct Failure : std::runtime_error {
    using std::runtime_error::runtime_error;
};
struct Usage : std::runtime_error {
    using std::runtime_error::runtime_error;
};

const char kUsage[] =
    "usage: hpcacct-sacct [-d CONNINFO] load FILE|-\n"
    "       hpcacct-sacct [-d CONNINFO] run [-M CLUSTER[,CLUSTER...]] [--since TIME] [--overlap SECONDS]\n"
    "                                       [--every SECONDS]\n"
    "       hpcacct-sacct [-d CONNINFO] sync-accounts [FILE|-]\n"
    "Connects with libpq's environment (PGHOST, PGDATABASE, PGUSER, ...) or CONNINFO.\n";

struct PGresultDeleter {
    void operator()(PGresult* r) const { PQclear(r); }
};
using Result = std::unique_ptr<PGresult, PGresultDeleter>;

class Connection {
public:
    explicit Connection(const std::string& conninfo) {
        // UTF-8 on the wire whatever the locale: lines that are not are quarantined, not sent
        const char* keys[] = {"dbname", "fallback_application_name", "client_encoding", nullptr};
        const char* values[] = {conninfo.empty() ? nullptr : conninfo.c_str(), "hpcacct-sacct", "UTF8", nullptr};
        conn_ = PQconnectdbParams(keys, values, 1);
        if (conn_ == nullptr) throw Failure("cannot allocate a connection");
        if (PQstatus(conn_) != CONNECTION_OK) {
            const std::string message = PQerrorMessage(conn_);
            PQfinish(conn_);
            conn_ = nullptr;
            throw Failure("cannot connect: " + hpcacct::pq::one_line(message));
        }
        hpcacct::pq::prefix_notices(conn_, "hpcacct-sacct");
        const std::string error = hpcacct::pq::set_session_format(conn_);
        if (!error.empty()) {
            PQfinish(conn_);
            conn_ = nullptr;
            throw Failure("cannot set the session's formatting: " + error);
        }
    }
    ~Connection() {
        if (conn_ != nullptr) PQfinish(conn_);
    }
    Connection(const Connection&) = delete;
    Connection& operator=(const Connection&) = delete;

    // Runs a statement; throws Failure with the server's message and SQLSTATE on error.
    Result exec(const std::string& sql, const std::vector<const char*>& params = {}) {
        Result r(PQexecParams(conn_, sql.c_str(), static_cast<int>(params.size()), nullptr,
                              params.empty() ? nullptr : params.data(), nullptr, nullptr, 0));
        check(r.get(), sql);
        return r;
    }

    void check(PGresult* r, const std::string& what) {
        const ExecStatusType status = PQresultStatus(r);
        if (status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK || status == PGRES_COPY_IN) return;
        // one line: the message, SQLSTATE and detail, and the statement's first line
        const std::string message = r != nullptr ? hpcacct::pq::describe(r) : hpcacct::pq::one_line(PQerrorMessage(conn_));
        throw Failure(message + "; while running: " + what.substr(0, what.find('\n')));
    }

    void copy_in(const std::string& sql) {
        Result r(PQexec(conn_, sql.c_str()));
        if (PQresultStatus(r.get()) != PGRES_COPY_IN) check(r.get(), sql);
    }
    void put(const std::string& data) {
        if (data.empty()) return;
        if (PQputCopyData(conn_, data.data(), static_cast<int>(data.size())) != 1) {
            throw Failure("COPY failed: " + hpcacct::pq::one_line(PQerrorMessage(conn_)));
        }
    }
    void end_copy(const char* error = nullptr, const std::string& what = "COPY") {
        if (PQputCopyEnd(conn_, error) != 1) throw Failure("COPY failed: " + hpcacct::pq::one_line(PQerrorMessage(conn_)));
        Result r(PQgetResult(conn_));
        while (Result more{PQgetResult(conn_)}) {
        }
        if (error == nullptr) check(r.get(), what);
    }
    void rollback() {
        if (conn_ != nullptr && PQtransactionStatus(conn_) != PQTRANS_IDLE) {
            PQclear(PQexec(conn_, "ROLLBACK"));
        }
    }

private:
    PGconn* conn_ = nullptr;
};

// Lines of a FILE*, with getline(3).
class Lines {
public:
    explicit Lines(FILE* f) : f_(f) {}
    ~Lines() { std::free(buffer_); }
    Lines(const Lines&) = delete;
    Lines& operator=(const Lines&) = delete;
    bool next(std::string_view& line) {
        errno = 0;
        const ssize_t n = getline(&buffer_, &capacity_, f_);
        if (n < 0) {
            if (errno != 0 && !std::feof(f_)) throw Failure(std::string("read error: ") + std::strerror(errno));
            return false;
        }
        line = std::string_view(buffer_, static_cast<std::size_t>(n));
        return true;
    }

private:
    FILE* f_;
    char* buffer_ = nullptr;
    std::size_t capacity_ = 0;
};

// A child process (sacct, sacctmgr) whose standard output is read as a FILE*.
class Child {
public:
    Child(const std::string& program, const std::vector<std::string>& args,
          const std::vector<std::pair<std::string, std::string>>& env) : program_(program) {
        int fds[2];
        if (pipe(fds) != 0) throw Failure(std::string("pipe: ") + std::strerror(errno));
        std::vector<std::string> argv_text;
        argv_text.push_back(program);
        argv_text.insert(argv_text.end(), args.begin(), args.end());
        std::vector<char*> argv;
        for (std::string& a : argv_text) argv.push_back(a.data());
        argv.push_back(nullptr);
        pid_ = fork();
        if (pid_ < 0) throw Failure(std::string("fork: ") + std::strerror(errno));
        if (pid_ == 0) {
            dup2(fds[1], STDOUT_FILENO);
            close(fds[0]);
            close(fds[1]);
            for (const auto& [name, value] : env) setenv(name.c_str(), value.c_str(), 1);
            execvp(program.c_str(), argv.data());
            std::fprintf(stderr, "hpcacct-sacct: cannot run %s: %s\n", program.c_str(), std::strerror(errno));
            _exit(127);
        }
        close(fds[1]);
        out_ = fdopen(fds[0], "r");
        if (out_ == nullptr) throw Failure(std::string("fdopen: ") + std::strerror(errno));
    }
    ~Child() {
        if (out_ != nullptr) std::fclose(out_);
        if (pid_ > 0 && !waited_) {
            kill(pid_, SIGTERM);
            int status;
            waitpid(pid_, &status, 0);
        }
    }
    Child(const Child&) = delete;
    Child& operator=(const Child&) = delete;
    FILE* out() { return out_; }
    // Waits for the child; throws Failure unless it exited with status 0.
    void finish() {
        std::fclose(out_);
        out_ = nullptr;
        int status = 0;
        while (waitpid(pid_, &status, 0) < 0) {
            if (errno != EINTR) throw Failure(std::string("waitpid: ") + std::strerror(errno));
        }
        waited_ = true;
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return;
        if (WIFEXITED(status)) {
            throw Failure(program_ + " exited with status " + std::to_string(WEXITSTATUS(status)) + ": nothing loaded");
        }
        throw Failure(program_ + " was killed by signal " + std::to_string(WTERMSIG(status)) + ": nothing loaded");
    }

private:
    std::string program_;
    pid_t pid_ = -1;
    FILE* out_ = nullptr;
    bool waited_ = false;
};

long long stage_sacct_lines(Connection& db, FILE* in, const std::string& source, std::string_view delimiter,
                            bool& copying);

// Streams sacct text from `in` into the staging table (COPY); returns the number of lines.
// A failure while copying ends the COPY with an error, so the transaction can roll back.
long long stage_sacct(Connection& db, FILE* in, const std::string& source, std::string_view delimiter = "|") {
    bool copying = false;
    try {
        return stage_sacct_lines(db, in, source, delimiter, copying);
    } catch (...) {
        if (copying) {
            try {
                db.end_copy("hpcacct-sacct stopped reading");
            } catch (...) {
            }
        }
        throw;
    }
}

// Streams `in` into a COPY: the first line that is not blank is the header, which `header`
// parses before the COPY (`copy`) starts and which returns the number of fields (and may set
// `delimiter`, read after it); the records
// after it (a record spans lines where a name holds a line break: sacct::RecordJoiner) go
// through `row(record, lineno, chunk)`, which appends its COPY text to `chunk`, sent 64 KiB
// at a time. Returns the number of records; throws Failure(`no_header`) if there is no header.
template <typename Header, typename Row>
long long copy_lines(Connection& db, FILE* in, const std::string& copy, const std::string& no_header, bool& copying,
                     const std::string& delimiter, Header header, Row row) {
    Lines lines(in);
    std::string_view line;
    long long lineno = 0;
    std::unique_ptr<sacct::RecordJoiner> joiner;
    std::vector<sacct::RecordJoiner::Record> ready;
    std::string chunk;
    long long rows = 0;
    auto emit = [&]() {
        for (const sacct::RecordJoiner::Record& r : ready) {
            row(std::string_view(r.text), r.lineno, chunk);
            ++rows;
        }
        ready.clear();
        if (chunk.size() >= (1 << 16)) {
            db.put(chunk);
            chunk.clear();
        }
    };
    while (lines.next(line)) {
        ++lineno;
        const std::string_view text = sacct::chomp(line);
        if (!joiner) {
            if (text.empty()) continue;
            const std::size_t width = header(line);  // may choose the delimiter
            joiner = std::make_unique<sacct::RecordJoiner>(width, delimiter);
            db.copy_in(copy);
            copying = true;
            continue;
        }
        if (text.empty() && !joiner->open()) continue;  // a blank line, unless inside a record
        joiner->add(text, lineno, ready);
        emit();
    }
    if (!joiner) throw Failure(no_header);
    joiner->finish(ready);
    emit();
    db.put(chunk);
    copying = false;
    db.end_copy(nullptr, copy);
    return rows;
}

long long stage_sacct_lines(Connection& db, FILE* in, const std::string& source, std::string_view delimiter,
                            bool& copying) {
    sacct::Header header = sacct::Header();
    std::string used(delimiter);
    return copy_lines(
        db, in, "COPY hpcacct.sacct_staging (" + sacct::staging_columns() + ") FROM STDIN",
        source + ": no sacct header line (empty input)", copying, used,
        [&](std::string_view line) {
            // a file written with sacct's --delimiter=$'\x1f', as `run` reads sacct
            if (used == "|" && line.find(sacct::kDelimiter) != std::string_view::npos) used = sacct::kDelimiter;
            try {
                header = sacct::Header::parse(line, used);
                return header.width();
            } catch (const hpcacct::Error& e) {
                throw Failure(source + ": " + e.what() + (e.detail().empty() ? "" : ". " + e.detail()));
            }
        },
        [&](std::string_view line, long long lineno, std::string& chunk) {
            if (!sacct::copy_row(header, line, lineno, chunk, used)) {
                std::fprintf(stderr, "hpcacct-sacct: %s:%lld: wrong number of fields or not UTF-8 (quarantined)\n",
                             source.c_str(), lineno);
            }
        });
}

// Prints the one row `r` as "what: column=value ...".
void print_report(const std::string& what, const Result& r) {
    std::string report = what + ":";
    for (int c = 0; c < PQnfields(r.get()); ++c) {
        report += std::string(" ") + PQfname(r.get(), c) + "=" + PQgetvalue(r.get(), 0, c);
    }
    std::printf("%s\n", report.c_str());
}

// Calls load_sacct() and prints what it did; returns nothing, throws on failure.
void load_and_report(Connection& db, const std::string& what, const char* through, const char* clusters) {
    print_report(what, db.exec("SELECT * FROM hpcacct.load_sacct($1::timestamptz, $2::text[])", {through, clusters}));
}

int command_load(Connection& db, const std::string& path) {
    FILE* in = stdin;
    if (path != "-") {
        in = std::fopen(path.c_str(), "r");
        if (in == nullptr) throw Failure("cannot open " + path + ": " + std::strerror(errno));
    }
    std::unique_ptr<FILE, int (*)(FILE*)> closer(path != "-" ? in : nullptr, std::fclose);
    db.exec("BEGIN");
    stage_sacct(db, in, path == "-" ? "standard input" : path);
    load_and_report(db, path, nullptr, nullptr);
    db.exec("COMMIT");
    return 0;
}

std::vector<std::string> split_list(const std::string& text) {
    std::vector<std::string> out;
    std::size_t from = 0;
    while (from <= text.size()) {
        const std::size_t comma = text.find(',', from);
        const std::string item = text.substr(from, comma == std::string::npos ? std::string::npos : comma - from);
        if (!item.empty()) out.push_back(item);
        if (comma == std::string::npos) break;
        from = comma + 1;
    }
    return out;
}

// The local cluster's name, from scontrol (when -M is not given).
std::string local_cluster() {
    Child child("scontrol", {"show", "config"}, {});
    Lines lines(child.out());
    std::string_view line;
    std::string name;
    while (lines.next(line)) {
        line = sacct::chomp(line);
        if (line.rfind("ClusterName", 0) == 0) {
            const std::size_t eq = line.find('=');
            if (eq != std::string_view::npos) {
                std::string_view v = line.substr(eq + 1);
                while (!v.empty() && v.front() == ' ') v.remove_prefix(1);
                name = std::string(v);
            }
        }
    }
    child.finish();
    if (name.empty()) throw Failure("scontrol show config names no ClusterName: give the cluster with -M");
    return name;
}

// sacct -M with a cluster slurmdbd does not know prints no job and succeeds: a typo in a
// timer would load nothing, silently, for ever. Ask sacctmgr first.
void require_known_cluster(const std::string& cluster) {
    Child child("sacctmgr", sacct::sacctmgr_cluster_arguments(cluster), {});
    Lines lines(child.out());
    std::string_view line;
    bool known = false;
    while (lines.next(line)) {
        if (sacct::chomp(line) == cluster) known = true;
    }
    child.finish();
    if (!known) throw Failure("slurmdbd knows no cluster named \"" + cluster + "\" (sacctmgr show cluster)");
}

int command_run(Connection& db, std::vector<std::string> clusters, const std::string& since, long overlap) {
    if (clusters.empty()) clusters.push_back(local_cluster());
    int failed = 0;
    for (const std::string& cluster : clusters) {
        try {
            require_known_cluster(cluster);
            const std::time_t now = std::time(nullptr);
            db.exec("BEGIN");
            std::string start;
            if (!since.empty()) {
                start = since;
            } else {
                const std::string overlap_text = std::to_string(overlap) + " seconds";
                Result r = db.exec("SELECT extract(epoch FROM hpcacct.sacct_window_start($1, $2::interval))::bigint",
                                   {cluster.c_str(), overlap_text.c_str()});
                if (PQgetisnull(r.get(), 0, 0)) {
                    throw Failure("cluster " + cluster + " was never loaded: give the first window's start with --since "
                                  "(e.g. --since 2024-01-01T00:00:00)");
                }
                start = sacct::utc_time_argument(static_cast<std::time_t>(std::atoll(PQgetvalue(r.get(), 0, 0))));
            }
            // A window from the watermark is given to sacct in UTC (TZ=UTC0): local text is
            // ambiguous in the hour a DST change repeats. --since is local time, as given.
            const bool utc = since.empty();
            const std::string end = utc ? sacct::utc_time_argument(now) : sacct::local_time_argument(now);
            std::vector<std::pair<std::string, std::string>> env = {{"SLURM_TIME_FORMAT", sacct::kTimeFormat}};
            if (utc) env.emplace_back("TZ", sacct::kUtcZone);
            Child child("sacct", sacct::sacct_arguments(cluster, start, end), env);
            stage_sacct(db, child.out(), "sacct -M " + cluster, sacct::kDelimiter);
            child.finish();  // a sacct that failed loads nothing, and the watermark stays
            const std::string through = std::to_string(static_cast<long long>(now));
            // ISO 8601 in UTC, read back the same in any session: the session's DateStyle
            // (PGDATESTYLE) may write a zone abbreviation that reads as another zone (IST)
            Result t = db.exec("SELECT pg_catalog.to_char(pg_catalog.to_timestamp($1::double precision) AT TIME ZONE 'UTC', "
                               "'YYYY-MM-DD\"T\"HH24:MI:SS\"+00\"')",
                               {through.c_str()});
            const std::string through_text = PQgetvalue(t.get(), 0, 0);
            std::string array = "{\"";
            for (char c : cluster) {
                if (c == '"' || c == '\\') array += '\\';
                array += c;
            }
            array += "\"}";
            load_and_report(db, "cluster " + cluster + " " + start + " .. " + end + (utc ? " UTC" : ""),
                            through_text.c_str(), array.c_str());
            db.exec("COMMIT");
        } catch (const Failure& e) {
            db.rollback();
            std::fprintf(stderr, "hpcacct-sacct: cluster %s: %s\n", cluster.c_str(), e.what());
            ++failed;
        }
    }
    return failed == 0 ? 0 : 1;
}

int command_sync(Connection& db, const std::string& path) {
    std::unique_ptr<Child> child;
    FILE* in = stdin;
    std::unique_ptr<FILE, int (*)(FILE*)> closer(nullptr, std::fclose);
    if (path.empty()) {
        child = std::make_unique<Child>("sacctmgr", sacct::sacctmgr_arguments(),
                                        std::vector<std::pair<std::string, std::string>>{});
        in = child->out();
    } else if (path != "-") {
        in = std::fopen(path.c_str(), "r");
        if (in == nullptr) throw Failure("cannot open " + path + ": " + std::strerror(errno));
        closer.reset(in);
    }
    db.exec("BEGIN");
    sacct::AssocHeader header;
    bool copying = false;
    long long skipped = 0;
    const std::string bar = "|";
    copy_lines(
        db, in, "COPY hpcacct.sacctmgr_staging (cluster, account, \"user\") FROM STDIN",
        "no sacctmgr header line (empty input)", copying, bar,
        [&](std::string_view line) {
            try {
                header = sacct::AssocHeader::parse(line);
                return header.width;
            } catch (const hpcacct::Error& e) {
                throw Failure(std::string(e.what()) + (e.detail().empty() ? "" : ". " + e.detail()));
            }
        },
        [&](std::string_view line, long long lineno, std::string& chunk) {
            // one odd line does not stop the others: said, counted, and tried again next time
            if (!sacct::assoc_copy_row(header, line, chunk)) {
                std::fprintf(stderr, "hpcacct-sacct: association line %lld has too few fields or is not UTF-8 (skipped): %s\n",
                             lineno, std::string(line).c_str());
                ++skipped;
            }
        });
    if (child) child->finish();
    const std::string skipped_text = std::to_string(skipped);
    Result r = db.exec("SELECT *, $1::bigint AS skipped FROM hpcacct.sync_slurm_accounts()", {skipped_text.c_str()});
    print_report("sync-accounts", r);
    db.exec("COMMIT");
    return 0;
}

// A number of seconds for --every and --overlap, from `least` to 2^31 - 1: larger ones
// overflowed the loop's clock arithmetic (undefined behaviour; a loop that never slept).
long seconds_option(const std::string& name, const std::string& text, long least) {
    char* end = nullptr;
    errno = 0;
    const long n = std::strtol(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || errno != 0 || n < least || n > 2147483647L) {
        throw Usage(name + " takes a number of seconds from " + std::to_string(least) + " to 2147483647, not \"" +
                    text + "\"");
    }
    return n;
}

int run(int argc, char** argv) {
    std::vector<std::string> args(argv + 1, argv + argc);
    std::string conninfo;
    std::size_t i = 0;
    while (i < args.size() && !args[i].empty() && args[i][0] == '-' && args[i] != "-") {
        if (args[i] == "-d") {
            if (i + 1 >= args.size()) throw Usage("-d needs a value");
            conninfo = args[i + 1];
            i += 2;
        } else if (args[i] == "-h" || args[i] == "--help") {
            std::fputs(kUsage, stdout);
            return 0;
        } else {
            throw Usage("unknown option " + args[i]);
        }
    }
    if (i >= args.size()) throw Usage("no command");
    const std::string command = args[i++];
    if (command == "load") {
        if (i + 1 != args.size()) throw Usage("load takes one FILE (or - for standard input)");
        Connection db(conninfo);
        return command_load(db, args[i]);
    }
    if (command == "run") {
        std::vector<std::string> clusters;
        std::string since;
        long overlap = 3600;
        long every = 0;
        for (; i < args.size(); ++i) {
            const bool takes_value = args[i] == "-M" || args[i] == "--clusters" || args[i] == "--since" ||
                                     args[i] == "--every" || args[i] == "--overlap";
            if (takes_value && i + 1 >= args.size()) throw Usage(args[i] + " needs a value");
            if ((args[i] == "-M" || args[i] == "--clusters") && i + 1 < args.size()) {
                clusters = split_list(args[++i]);
            } else if (args[i] == "--since" && i + 1 < args.size()) {
                since = args[++i];
            } else if (args[i] == "--every" && i + 1 < args.size()) {
                every = seconds_option("--every", args[++i], 1);
            } else if (args[i] == "--overlap" && i + 1 < args.size()) {
                overlap = seconds_option("--overlap", args[++i], 0);
            } else {
                throw Usage("unknown argument " + args[i] + " to run");
            }
        }
        if (every == 0) {
            Connection db(conninfo);
            return command_run(db, clusters, since, overlap);
        }
        // A loop for a systemd service or a shell: one run every `every` seconds (counted
        // from the start of the last), a new connection each time; a failed run is
        // reported and the next one tried. --since applies to the first run only.
        for (;;) {
            const std::time_t started = std::time(nullptr);
            try {
                Connection db(conninfo);
                if (command_run(db, clusters, since, overlap) == 0) since.clear();
            } catch (const Failure& e) {
                std::fprintf(stderr, "hpcacct-sacct: %s\n", e.what());
            }
            std::fflush(stdout);
            const std::time_t next = started + every;
            for (std::time_t now = std::time(nullptr); now < next; now = std::time(nullptr)) {
                sleep(static_cast<unsigned>(next - now));
            }
        }
    }
    if (command == "sync-accounts") {
        if (i + 1 < args.size()) throw Usage("sync-accounts takes at most one FILE");
        Connection db(conninfo);
        return command_sync(db, i < args.size() ? args[i] : std::string());
    }
    throw Usage("unknown command " + command);
}

}  // namespace

int main(int argc, char** argv) {
    hpcacct::pq::keep_standard_streams();
    std::signal(SIGPIPE, SIG_IGN);
    try {
        return run(argc, argv);
    } catch (const Usage& e) {
        std::fprintf(stderr, "hpcacct-sacct: %s\n%s", e.what(), kUsage);
        return 2;
    } catch (const Failure& e) {
        std::fprintf(stderr, "hpcacct-sacct: %s\n", e.what());
    } catch (const hpcacct::Error& e) {
        std::fprintf(stderr, "hpcacct-sacct: %s\n", e.what());
    } catch (const std::bad_alloc&) {
        std::fprintf(stderr, "hpcacct-sacct: out of memory\n");
    } catch (const std::exception& e) {
        std::fprintf(stderr, "hpcacct-sacct: unexpected error: %s\n", e.what());
    } catch (...) {
        std::fprintf(stderr, "hpcacct-sacct: unexpected error\n");
    }
    return 1;
}
