// PostgreSQL dates as the core's boost::gregorian::date and month indexes.
#pragma once

#include "pg/postgres.hpp"

#include "pg/guard.hpp"

extern "C" {
#include "datatype/timestamp.h"
#include "utils/date.h"
#include "utils/datetime.h"
}

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

// Months counted as year * 12 + month - 1, so that consecutive months differ by one.
inline int month_index(DateADT date, const char* what) {
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

}  // namespace hpcacct::pg
