// SQL area: equivalents and job charges.
#include "pg/tres_datum.hpp"

extern "C" {
#include "datatype/timestamp.h"
#include "utils/timestamp.h"
}

#include "core/charge.hpp"

using hpcacct::pg::guarded;
using hpcacct::pg::tres_arg;
namespace tres = hpcacct::tres;

namespace {

// Wall-clock hours of an elapsed interval. A month has no fixed length, so an interval
// with a month part is refused; days count 24 hours, as `end - start` produces them.
double hours_of(const Interval* elapsed) {
    if (elapsed->month != 0) {
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("elapsed time must not have a month part"),
                        errhint("Pass the difference of two timestamps, e.g. \"end\" - start.")));
    }
    const double usecs = static_cast<double>(elapsed->day) * USECS_PER_DAY + static_cast<double>(elapsed->time);
    if (usecs < 0) {
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE), errmsg("elapsed time must not be negative")));
    }
    return usecs / USECS_PER_HOUR;
}

}  // namespace

extern "C" {

PG_FUNCTION_INFO_V1(hpcacct_equivalents);
Datum hpcacct_equivalents(PG_FUNCTION_ARGS) {
    const tres::View request = tres_arg(fcinfo, 0);
    const tres::View bundle = tres_arg(fcinfo, 1);
    PG_RETURN_FLOAT8(guarded([&] { return hpcacct::charge::equivalents(request, bundle); }));
}

// charge(alloc, elapsed, bundle, rate, node DEFAULT NULL): NULL in the first four
// arguments gives NULL; a NULL node means a shared node type.
PG_FUNCTION_INFO_V1(hpcacct_charge);
Datum hpcacct_charge(PG_FUNCTION_ARGS) {
    for (int i = 0; i < 4; ++i) {
        if (PG_ARGISNULL(i)) PG_RETURN_NULL();
    }
    const tres::View request = tres_arg(fcinfo, 0);
    const double hours = hours_of(PG_GETARG_INTERVAL_P(1));
    const tres::View bundle = tres_arg(fcinfo, 2);
    const double rate = PG_GETARG_FLOAT8(3);
    const bool exclusive = PG_NARGS() > 4 && !PG_ARGISNULL(4);
    tres::View node;
    if (exclusive) node = tres_arg(fcinfo, 4);
    PG_RETURN_FLOAT8(guarded([&] {
        return hpcacct::charge::job_charge(request, hours, bundle, rate, exclusive ? &node : nullptr);
    }));
}

}  // extern "C"
