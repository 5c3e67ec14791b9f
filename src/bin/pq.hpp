// What hpcacct's libpq clients share (hpcacct-notify, hpcacct-report): a result that clears
// itself, a statement with text parameters, and the server's error as psql prints it.
#pragma once

#include <libpq-fe.h>

#include <memory>
#include <string>
#include <vector>

namespace hpcacct::pq {

using Result = std::unique_ptr<PGresult, void (*)(PGresult *)>;

// Runs a statement with text parameters ($1, $2, ...); check the result with succeeded().
inline Result exec(PGconn *conn, const char *sql, const std::vector<std::string> &params) {
    std::vector<const char *> values;
    for (const auto &s : params) values.push_back(s.c_str());
    return Result(PQexecParams(conn, sql, static_cast<int>(values.size()), nullptr, values.data(), nullptr, nullptr, 0),
                  PQclear);
}

inline bool succeeded(const PGresult *r) {
    const ExecStatusType status = PQresultStatus(r);
    return status == PGRES_TUPLES_OK || status == PGRES_COMMAND_OK;
}

// The server's message with its SQLSTATE and detail, on one line.
inline std::string describe(const PGresult *r) {
    std::string msg = PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY) ? PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY)
                                                                      : PQresultErrorMessage(r);
    if (const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE)) msg += std::string(" (SQLSTATE ") + state + ")";
    if (const char *detail = PQresultErrorField(r, PG_DIAG_MESSAGE_DETAIL)) msg += std::string("; ") + detail;
    while (!msg.empty() && msg.back() == '\n') msg.pop_back();
    return msg;
}

}  // namespace hpcacct::pq
