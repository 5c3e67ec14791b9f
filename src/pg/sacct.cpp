// SQL area: the sacct loader (issue 14) — checks that let one set-based statement sort the
// lines it can charge from those it must quarantine, without raising on the first bad one.
#include "pg/postgres.hpp"

#include "pg/guard.hpp"

extern "C" {
#include "datatype/timestamp.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
}

#include "core/error.hpp"
#include "core/sacct.hpp"
#include "core/tres.hpp"
#include "pg/tres_datum.hpp"

#include <cstdio>
#include <string_view>

using hpcacct::pg::Across;
using hpcacct::pg::guarded;
using hpcacct::pg::tres_datum;
namespace sacct = hpcacct::sacct;
namespace tres = hpcacct::tres;

namespace {

// What parsing a TRES text found wrong; trivially destructible, filled inside guarded().
struct Problem {
    bool found;
    hpcacct::ErrorKind kind;
    char message[768];
};

}  // namespace

extern "C" {

// tres_problem(text) → text: NULL when the text is a valid tres, otherwise
// 'SQLSTATE message' — the error its input would raise, as a value instead of an error.
PG_FUNCTION_INFO_V1(hpcacct_tres_problem);
Datum hpcacct_tres_problem(PG_FUNCTION_ARGS) {
    const text* input = PG_GETARG_TEXT_PP(0);
    const std::string_view view(VARDATA_ANY(input), VARSIZE_ANY_EXHDR(input));
    Across<Problem> problem;  // read after the guarded body, before ereport
    problem.found = false;
    guarded([&] {
        try {
            tres::Vector parsed;
            tres::parse(view, parsed);
        } catch (const hpcacct::Error& e) {
            problem.found = true;
            problem.kind = e.kind();
            if (e.detail().empty()) {
                std::snprintf(problem.message, sizeof problem.message, "%s", e.what());
            } else {
                std::snprintf(problem.message, sizeof problem.message, "%s (%s)", e.what(), e.detail().c_str());
            }
        }
    });
    if (!problem.found) PG_RETURN_NULL();
    char out[sizeof problem.message + 8];
    std::snprintf(out, sizeof out, "%s %s", unpack_sql_state(hpcacct::pg::sqlstate_of(problem.kind)), problem.message);
    PG_RETURN_TEXT_P(cstring_to_text(out));
}

// sacct_time(value text, zone text) → timestamptz: a sacct time (sacct::parse_time): epoch
// seconds or ISO with an offset are that instant, ISO without one is read in `zone` as
// timezone(zone, timestamp) reads it; NULL when the text is not a time, or has no offset and
// zone is NULL. An unknown zone raises, as timezone() does.
PG_FUNCTION_INFO_V1(hpcacct_sacct_time);
Datum hpcacct_sacct_time(PG_FUNCTION_ARGS) {
    if (PG_ARGISNULL(0)) PG_RETURN_NULL();
    const text* input = PG_GETARG_TEXT_PP(0);
    const std::string_view view(VARDATA_ANY(input), VARSIZE_ANY_EXHDR(input));
    const sacct::Time time = guarded([&] { return sacct::parse_time(view); });
    constexpr long long kUnixToPostgresSeconds =
        static_cast<long long>(POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * SECS_PER_DAY;
    // years 1 to 5138 (11 digits of seconds): within timestamp's range, no overflow
    const int64 since_2000 = (time.seconds - kUnixToPostgresSeconds) * USECS_PER_SEC;
    switch (time.kind) {
        case sacct::Time::Kind::instant:
            PG_RETURN_TIMESTAMPTZ(since_2000);
        case sacct::Time::Kind::local:
            if (PG_ARGISNULL(1)) PG_RETURN_NULL();
            return DirectFunctionCall2(timestamp_zone, PG_GETARG_DATUM(1), TimestampGetDatum(since_2000));
        case sacct::Time::Kind::none:
            break;
    }
    PG_RETURN_NULL();
}

// sacct_tres(text) → tres: the text as a tres, or NULL where its input would raise a data
// error (tres_problem() says which); the loader parses each line's AllocTRES once with it.
PG_FUNCTION_INFO_V1(hpcacct_sacct_tres);
Datum hpcacct_sacct_tres(PG_FUNCTION_ARGS) {
    const text* input = PG_GETARG_TEXT_PP(0);
    const std::string_view view(VARDATA_ANY(input), VARSIZE_ANY_EXHDR(input));
    Across<tres::Vector> parsed;  // lives across palloc
    const bool valid = guarded([&] {
        try {
            tres::parse(view, parsed);
            return true;
        } catch (const hpcacct::Error&) {
            return false;
        }
    });
    if (!valid) PG_RETURN_NULL();
    return tres_datum(parsed);
}

}  // extern "C"
