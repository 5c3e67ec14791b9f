// The month measure and theoretical consumption, GENCI/IDRIS (calendar::*, theoretical::*).
//
// Input: [convention: 1 byte] 3 dates of [kind: 1 byte][year: int16][month: 1 byte][day: 1 byte]
// (kind % 8 == 0 makes a special date: not-a-date, +inf or -inf), [amount: double],
// [consumption: double], then doubles for a compensated sum.
// Properties:
//  - make_date accepts exactly the real dates of 1400..9999 (else Error(invalid_datetime));
//  - month_position is monotone; months_spanned >= 0 (> 0 under the day convention) and
//    window_months, when it accepts a window, equals months_spanned and is > 0;
//  - TMC(at) is amount / window inside the window and 0 outside; TC(at) is 0 before the window,
//    exactly the amount from its last day on, and between 0 and the amount inside it, with no
//    rounding slack (a subnormal amount included);
//  - regulation_status is ok whenever TMC <= 0;
//  - Sum::add either keeps a finite state or refuses (out_of_range) a non-finite summand or an
//    overflow, leaving the state unchanged; Sum never yields a non-finite value;
//  - anything refused is refused with hpcacct::Error.
#include "fuzz_support.hpp"

#include "core/calendar.hpp"
#include "core/theoretical.hpp"

#include "../unit/date_forms.hpp"  // Boost dates split and checked as the glue does, then the core

#include <optional>

namespace calendar = hpcacct::calendar;
namespace theoretical = hpcacct::theoretical;
namespace dates = hpcacct::testing::dates;
using dates::date;
using hpcacct::Error;
using hpcacct::ErrorKind;

namespace {

bool real_date(int year, int month, int day) {
    static const int days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (year < 1400 || year > 9999 || month < 1 || month > 12 || day < 1) return false;
    const bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    return day <= days[month - 1] + (month == 2 && leap ? 1 : 0);
}

std::optional<date> read_date(fuzz::Reader& in) {
    const std::uint8_t kind = in.byte();
    const int year = in.take<std::int16_t>();
    const int month = in.byte();
    const int day = in.byte();
    if (kind % 8 == 0) {
        switch (kind / 8 % 3) {
            case 0: return date(boost::gregorian::not_a_date_time);
            case 1: return date(boost::gregorian::pos_infin);
            default: return date(boost::gregorian::neg_infin);
        }
    }
    try {
        const date d = dates::make_date(year, month, day);
        FUZZ_CHECK(real_date(year, month, day), "make_date accepted %d-%d-%d", year, month, day);
        return d;
    } catch (const Error& e) {
        FUZZ_CHECK(e.kind() == ErrorKind::invalid_datetime, "make_date: error kind %d", static_cast<int>(e.kind()));
        FUZZ_CHECK(!real_date(year, month, day), "make_date refused %d-%d-%d", year, month, day);
        return std::nullopt;
    }
}

template <typename F>
auto attempt(F&& f) -> std::optional<decltype(f())> {
    try {
        return f();
    } catch (const Error&) {
        return std::nullopt;
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    fuzz::Reader in(data, size);
    const auto convention = in.byte() % 2 ? calendar::MonthConvention::day : calendar::MonthConvention::half_month;
    const std::optional<date> from = read_date(in), until = read_date(in), at = read_date(in);
    const double amount = in.take<double>();
    const double consumption = in.take<double>();

    if (from && until) {
        const auto p_from = attempt([&] { return dates::month_position(*from, convention); });
        const auto p_until = attempt([&] { return dates::month_position(*until, convention); });
        if (p_from && p_until && *from < *until) FUZZ_CHECK(*p_from <= *p_until, "month_position not monotone");

        const auto spanned = attempt([&] { return dates::months_spanned(*from, *until, convention); });
        if (spanned) {
            FUZZ_CHECK(std::isfinite(*spanned) && *spanned >= 0, "months_spanned = %g", *spanned);
            if (convention == calendar::MonthConvention::day) FUZZ_CHECK(*spanned > 0, "empty day window");
        }
        const auto window = attempt([&] { return dates::window_months(*from, *until, convention); });
        if (window) FUZZ_CHECK(spanned && *window == *spanned && *window > 0, "window_months = %g", *window);

        if (at) {
            const auto tmc =
                attempt([&] { return dates::tmc_contribution(*from, *until, amount, *at, convention); });
            const auto tc =
                attempt([&] { return dates::tc_contribution(*from, *until, amount, *at, convention); });
            if (tmc || tc) FUZZ_CHECK(window && std::isfinite(amount), "a contribution without a valid window");
            if (tmc) {
                FUZZ_CHECK(std::isfinite(*tmc), "TMC = %g", *tmc);
                if (*at < *from || *until < *at) {
                    FUZZ_CHECK(*tmc == 0, "TMC = %g outside the window", *tmc);
                } else {
                    FUZZ_CHECK(*tmc == amount / *window, "TMC = %g, amount / window = %g", *tmc, amount / *window);
                }
            }
            if (tc) {
                FUZZ_CHECK(std::isfinite(*tc), "TC = %g", *tc);
                if (*at < *from) {
                    FUZZ_CHECK(*tc == 0, "TC = %g before the window", *tc);
                } else if (!(*at < *until)) {
                    FUZZ_CHECK(*tc == amount, "TC = %g after the window, amount %g", *tc, amount);
                } else {
                    FUZZ_CHECK(std::fabs(*tc) <= std::fabs(amount) && (*tc == 0 || (*tc > 0) == (amount > 0)),
                               "TC = %.17g inside the window, amount %.17g", *tc, amount);
                }
            }
            if (tmc && tc) {
                const auto status = attempt([&] { return theoretical::regulation_status(consumption, *tc, *tmc); });
                if (status) {
                    FUZZ_CHECK(*tmc > 0 || *status == theoretical::RegulationStatus::ok, "status without hours");
                    (void)theoretical::to_string(*status);
                }
            }
        }
    }

    theoretical::Sum all, part[2];
    for (int i = 0; in.remaining() > 0; ++i) {
        const double x = in.take<double>();
        for (theoretical::Sum* s : {&all, &part[i % 2]}) {
            const theoretical::Sum before = *s;
            try {
                s->add(x);
                FUZZ_CHECK(std::isfinite(s->sum) && std::isfinite(s->compensation), "Sum::add(%g) overflowed", x);
            } catch (const Error& e) {
                FUZZ_CHECK(e.kind() == ErrorKind::out_of_range, "Sum::add: error kind %d", static_cast<int>(e.kind()));
                FUZZ_CHECK(!std::isfinite(x) || !std::isfinite(before.sum + x), "Sum refused %g", x);
                FUZZ_CHECK(std::memcmp(s, &before, sizeof before) == 0, "a refused summand changed the Sum");
            }
        }
    }
    try {
        part[0].merge(part[1]);
    } catch (const Error& e) {
        FUZZ_CHECK(e.kind() == ErrorKind::out_of_range, "Sum::merge: error kind %d", static_cast<int>(e.kind()));
    }
    for (const theoretical::Sum& s : {all, part[0]}) {
        const auto value = attempt([&] { return s.value(); });
        if (value) FUZZ_CHECK(std::isfinite(*value), "Sum::value() = %g", *value);
    }
    return 0;
}
