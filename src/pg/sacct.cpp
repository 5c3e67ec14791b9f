// SQL area: the sacct loader (issue 14) — checks that let one set-based statement sort the
// lines it can charge from those it must quarantine, without raising on the first bad one.
#include "pg/postgres.hpp"

#include "pg/guard.hpp"

extern "C" {
#include "utils/builtins.h"
}

#include "core/error.hpp"
#include "core/tres.hpp"

#include <cstdio>
#include <string_view>

using hpcacct::pg::Across;
using hpcacct::pg::guarded;
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

}  // extern "C"
