// PostgreSQL dates as the core's day counts and month indexes.
#pragma once

#include "pg/postgres.hpp"

extern "C" {
#include "datatype/timestamp.h"
#include "utils/date.h"
#include "utils/datetime.h"
}

#include "core/calendar.hpp"

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

// Whether `date` is in 1400-01-01 .. 9999-12-31 (calendar::kFirstDay .. kLastDay), where it
// is split with integer arithmetic (calendar::civil_of_day) rather than j2date.
inline bool in_supported_range(DateADT date) {
    return date >= calendar::kFirstDay && date <= calendar::kLastDay;
}

// Months counted as year * 12 + month - 1, so that consecutive months differ by one.
inline int month_index(DateADT date, const char* what) {
    if (likely(in_supported_range(date))) {
        const calendar::Civil civil = calendar::civil_of_day(date);
        return civil.year * 12 + civil.month - 1;
    }
    const CivilDate civil = civil_date(date, what);
    return civil.year * 12 + civil.month - 1;
}

// A date of 1400-01-01 .. 9999-12-31 as it is (days from 2000-01-01), the range of the
// theoretical aggregates; any other is an error naming `what` (22008).
inline DateADT supported_day(DateADT date, const char* what) {
    if (likely(in_supported_range(date))) return date;
    const CivilDate civil = civil_date(date, what);  // an infinite date is refused there
    ereport(ERROR, (errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
                    errmsg("%s %04d-%02d-%02d is outside the supported range 1400-01-01 to 9999-12-31", what,
                           civil.year, civil.month, civil.day)));
    pg_unreachable();
}

}  // namespace hpcacct::pg
