// The core's keyword parsers: calendar::parse_month_convention (the month measure of the
// GENCI functions) and bank::parse_entry_kind (the kind column of quarter_balance), and
// bank::parse_micro_units (numeric's text form, the amount of quarter_balance).
//
// Properties, for every input (the same bytes go to both):
//  - each either accepts exactly its documented words or throws hpcacct::Error of kind
//    invalid_argument (22023);
//  - an accepted month convention prints back as the same word (to_string);
//  - parse_micro_units accepts a number or throws invalid_text or out_of_range; what it accepts,
//    printed with 6 decimals, parses back to the same micro-units.
#include "fuzz_support.hpp"

#include "core/bank.hpp"
#include "core/calendar.hpp"

#include <cstdio>

namespace calendar = hpcacct::calendar;
namespace bank = hpcacct::bank;
using hpcacct::Error;
using hpcacct::ErrorKind;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);

    try {
        const calendar::MonthConvention c = calendar::parse_month_convention(text);
        FUZZ_CHECK(text == "half_month" || text == "day", "month convention \"%s\" accepted",
                   fuzz::shown(text).c_str());
        FUZZ_CHECK(text == calendar::to_string(c), "\"%s\" prints as \"%s\"", fuzz::shown(text).c_str(),
                   calendar::to_string(c));
    } catch (const Error& e) {
        FUZZ_CHECK(e.kind() == ErrorKind::invalid_argument, "month convention: error kind %d",
                   static_cast<int>(e.kind()));
        FUZZ_CHECK(text != "half_month" && text != "day", "\"%s\" refused", fuzz::shown(text).c_str());
    }

    const std::string_view kinds[] = {"deposit", "charge", "transfer", "refund"};
    try {
        const bank::EntryKind k = bank::parse_entry_kind(text);
        const auto index = static_cast<std::size_t>(k);
        FUZZ_CHECK(index < 4 && kinds[index] == text, "entry kind \"%s\" read as %zu", fuzz::shown(text).c_str(),
                   index);
    } catch (const Error& e) {
        FUZZ_CHECK(e.kind() == ErrorKind::invalid_argument, "entry kind: error kind %d", static_cast<int>(e.kind()));
        for (std::string_view k : kinds) FUZZ_CHECK(text != k, "\"%s\" refused", fuzz::shown(text).c_str());
    }
    try {
        const std::int64_t micro = bank::parse_micro_units(text);
        const bool negative = micro < 0;
        const unsigned long long magnitude =
            negative ? 0ULL - static_cast<unsigned long long>(micro) : static_cast<unsigned long long>(micro);
        char printed[40];
        std::snprintf(printed, sizeof printed, "%s%llu.%06llu", negative ? "-" : "", magnitude / 1000000,
                      magnitude % 1000000);
        FUZZ_CHECK(bank::parse_micro_units(printed) == micro, "\"%s\" is %s, which does not parse back",
                   fuzz::shown(text).c_str(), printed);
    } catch (const Error& e) {
        FUZZ_CHECK(e.kind() == ErrorKind::invalid_text || e.kind() == ErrorKind::out_of_range,
                   "micro-units: error kind %d", static_cast<int>(e.kind()));
    }
    return 0;
}
