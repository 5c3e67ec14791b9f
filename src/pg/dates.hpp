// PostgreSQL dates as the core's boost::gregorian::date and month indexes.
#pragma once

#include "pg/postgres.hpp"

#include "pg/guard.hpp"

extern "C" {
#include "datatype/timestamp.h"
#include "utils/date.h"
#include "utils/datetime.h"
}

#include "core/calendar.hpp"

#include <boost/date_time/gregorian/gregorian_types.hpp>

namespace hpcacct::pg {

struct CivilDate {
    int year;
    int month;
    int day;
};

// Year, month and day of a finite date; an infinite one is an error naming `what`.
inline CivilDate civil_date(DateADT date, const char* what) {
    if (DATE_NOT_FINITE(date)) {
        ereport(ERROR, (errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE), errmsg("%s must be a finite date", what)));
    }
    CivilDate civil;
    j2date(date + POSTGRES_EPOCH_JDATE, &civil.year, &civil.month, &civil.day);
    return civil;
}

// DateADT counts days from 2000-01-01, as the core's calendar::civil_of_day does.
static_assert(POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE == 10957, "DateADT day 0 is 2000-01-01");

// Whether `date` is in Boost's range 1400-01-01 .. 9999-12-31, where the per-row paths below
// split it with integer arithmetic (calendar::civil_of_day) rather than j2date and Boost.
inline bool in_boost_range(DateADT date) {
    return date >= calendar::kFirstDay && date <= calendar::kLastDay;
}

// Months counted as year * 12 + month - 1, so that consecutive months differ by one.
inline int month_index(DateADT date, const char* what) {
    if (likely(in_boost_range(date))) {
        const calendar::Civil civil = calendar::civil_of_day(date);
        return civil.year * 12 + civil.month - 1;
    }
    const CivilDate civil = civil_date(date, what);
    return civil.year * 12 + civil.month - 1;
}

// Boost covers 1400-01-01 .. 9999-12-31; outside it, an error naming `what`.
inline boost::gregorian::date gregorian_date(DateADT date, const char* what) {
    const CivilDate civil = civil_date(date, what);
    if (civil.year < 1400 || civil.year > 9999) {
        ereport(ERROR, (errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
                        errmsg("%s %04d-%02d-%02d is outside the supported range 1400-01-01 to 9999-12-31", what,
                               civil.year, civil.month, civil.day)));
    }
    return guarded([&] {
        return boost::gregorian::date(static_cast<unsigned short>(civil.year),
                                      static_cast<unsigned short>(civil.month), static_cast<unsigned short>(civil.day));
    });
}

// A date in Boost's range as it is (days from 2000-01-01); for any other date, the error
// gregorian_date() raises (infinite, or outside 1400-01-01 .. 9999-12-31).
inline DateADT boost_range_day(DateADT date, const char* what) {
    if (likely(in_boost_range(date))) return date;
    gregorian_date(date, what);  // raises the error: no date outside the range passes it
    ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("%s: unexpected date %d", what, date)));
    pg_unreachable();
}

}  // namespace hpcacct::pg
