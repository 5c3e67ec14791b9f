// What hpcacct's libpq clients share (hpcacct-notify, hpcacct-report, hpcacct-sacct): a result
// that clears itself, a statement with text parameters, the server's error on one line, the
// session's formatting settings, and standard streams the connection cannot take.
#pragma once

#include <libpq-fe.h>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

namespace hpcacct::pq {

using Result = std::unique_ptr<PGresult, void (*)(PGresult *)>;

// Text parameters ($1, $2, ...) as libpq takes them: pointers into params.
inline std::vector<const char *> values_of(const std::vector<std::string> &params) {
    std::vector<const char *> values;
    values.reserve(params.size());
    for (const auto &s : params) values.push_back(s.c_str());
    return values;
}

// Runs a statement with text parameters; check the result with succeeded().
inline Result exec(PGconn *conn, const char *sql, const std::vector<std::string> &params) {
    const std::vector<const char *> values = values_of(params);
    return Result(PQexecParams(conn, sql, static_cast<int>(values.size()), nullptr, values.data(), nullptr, nullptr, 0),
                  PQclear);
}

// Sends it without waiting for the result (PQgetResult): 0 on failure.
inline int send(PGconn *conn, const char *sql, const std::vector<std::string> &params) {
    const std::vector<const char *> values = values_of(params);
    return PQsendQueryParams(conn, sql, static_cast<int>(values.size()), nullptr, values.data(), nullptr, nullptr, 0);
}

// libpq's message on one line (it puts a hint after "\n\t", a query's position on lines of
// their own): its lines, trimmed, joined by a space. A cron job's operator reads one line.
inline std::string one_line(const std::string &text) {
    std::string out;
    std::size_t from = 0;
    while (from < text.size()) {
        std::size_t end = text.find('\n', from);
        if (end == std::string::npos) end = text.size();
        std::size_t b = text.find_first_not_of(" \t\r", from);
        std::size_t e = end;
        while (e > from && (text[e - 1] == ' ' || text[e - 1] == '\t' || text[e - 1] == '\r')) --e;
        if (b != std::string::npos && b < e) out += (out.empty() ? "" : " ") + text.substr(b, e - b);
        from = end + 1;
    }
    return out;
}

// The formatting settings of a default session, whatever PGOPTIONS, PGDATESTYLE or ALTER ROLE
// ... SET gave this one: what a command prints, sends or writes must not change with them.
// The session's TimeZone is kept (the SQL does not depend on it). Returns the error, or "".
inline std::string set_session_format(PGconn *conn) {
    PGresult *r = PQexec(conn, "SET DateStyle = 'ISO, MDY'; SET IntervalStyle = 'postgres'; SET extra_float_digits = 1");
    std::string error = PQresultStatus(r) == PGRES_COMMAND_OK ? "" : one_line(PQresultErrorMessage(r));
    PQclear(r);
    return error;
}

// Reopens a closed standard stream (0, 1, 2) on /dev/null, read-only: else the connection's
// socket takes its descriptor, and stdin is read from, or stdout and stderr written into, the
// database connection. A write to it then fails (EBADF), as to a closed stream. Call first.
inline void keep_standard_streams() {
    for (int fd = 0; fd <= 2; ++fd) {
        if (fcntl(fd, F_GETFD) >= 0 || errno != EBADF) continue;
        const int n = open("/dev/null", O_RDONLY);  // the lowest free descriptor: fd
        if (n >= 0 && n != fd) {
            dup2(n, fd);
            close(n);
        }
    }
}

inline bool succeeded(const PGresult *r) {
    const ExecStatusType status = PQresultStatus(r);
    return status == PGRES_TUPLES_OK || status == PGRES_COMMAND_OK;
}

// The server's message with its SQLSTATE and detail, on one line (no "LINE 1:" and caret).
inline std::string describe(const PGresult *r) {
    std::string msg = PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY) ? PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY)
                                                                      : PQresultErrorMessage(r);
    if (const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE)) msg += std::string(" (SQLSTATE ") + state + ")";
    if (const char *detail = PQresultErrorField(r, PG_DIAG_MESSAGE_DETAIL)) msg += std::string("; ") + detail;
    return one_line(msg);
}

}  // namespace hpcacct::pq

// libpq's notice processor, with C linkage: a notice, or a message the server sends outside a
// query (FATAL: terminating connection ...), as "PROGRAM: message" on one line of stderr.
extern "C" inline void hpcacct_pq_notice_line(void *program, const char *message) {
    std::fprintf(stderr, "%s: %s\n", static_cast<const char *>(program), hpcacct::pq::one_line(message).c_str());
}

namespace hpcacct::pq {

// Instead of libpq's default, which prints them raw: `program` must outlive the connection.
inline void prefix_notices(PGconn *conn, const char *program) {
    PQsetNoticeProcessor(conn, hpcacct_pq_notice_line, const_cast<char *>(program));
}

}  // namespace hpcacct::pq
