// tres text input (tres::parse, behind hpcacct_internal.tres_in).
//
// Properties, for every input:
//  - parse either succeeds or throws hpcacct::Error of kind invalid_text, out_of_range or
//    program_limit (the SQLSTATEs 22P02, 22003, 54000);
//  - a parsed value is canonical: keys valid and strictly ascending, at most kMaxComponents,
//    values finite and in (0, kMaxValue];
//  - its packed bytes make a View, format_length is the length format writes, and the text
//    parses back to the identical packed bytes (in(out(x)) = x), which formats to the same text.
#include "fuzz_support.hpp"

#include <cstdint>

namespace tres = hpcacct::tres;
using hpcacct::Error;
using hpcacct::ErrorKind;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    tres::Vector parsed;
    try {
        tres::parse(text, parsed);
    } catch (const Error& e) {
        FUZZ_CHECK(e.kind() == ErrorKind::invalid_text || e.kind() == ErrorKind::out_of_range ||
                       e.kind() == ErrorKind::program_limit,
                   "unexpected error kind %d (%s) for \"%s\"", static_cast<int>(e.kind()), e.what(),
                   fuzz::shown(text).c_str());
        return 0;
    }

    FUZZ_CHECK(parsed.size() <= tres::kMaxComponents, "%zu components", parsed.size());
    for (std::size_t i = 0; i < parsed.size(); ++i) {
        const tres::Component& c = parsed[i];
        FUZZ_CHECK(tres::valid_key(c.name()), "invalid key \"%s\" accepted from \"%s\"",
                   fuzz::shown(c.name()).c_str(), fuzz::shown(text).c_str());
        FUZZ_CHECK(i == 0 || parsed[i - 1].name() < c.name(), "keys out of order in \"%s\"", fuzz::shown(text).c_str());
        FUZZ_CHECK(std::isfinite(c.value) && c.value > 0 && c.value <= tres::kMaxValue,
                   "value %.17g of \"%s\" accepted from \"%s\"", c.value, fuzz::shown(c.name()).c_str(),
                   fuzz::shown(text).c_str());
    }

    const std::vector<unsigned char> bytes = fuzz::packed(parsed);
    // Errors below this point are findings: a parsed value must always print and read back.
    const tres::View view(bytes.data(), bytes.size());
    FUZZ_CHECK(view.size() == parsed.size(), "View sees %zu of %zu components", view.size(), parsed.size());
    tres::View::Cursor cursor = view.cursor();
    while (cursor.next()) {
        FUZZ_CHECK(view.get(cursor.key()) == cursor.value(), "get(\"%s\") disagrees with the cursor",
                   fuzz::shown(cursor.key()).c_str());
        FUZZ_CHECK(parsed.get(cursor.key()) == cursor.value(), "Vector::get(\"%s\") disagrees",
                   fuzz::shown(cursor.key()).c_str());
    }
    FUZZ_CHECK(tres::compare(view, view) == 0, "a value differs from itself");

    const std::string out = fuzz::formatted(view);
    tres::Vector reparsed;
    try {
        tres::parse(out, reparsed);
    } catch (const Error& e) {
        FUZZ_CHECK(false, "canonical text \"%s\" of \"%s\" does not parse: %s (%s)", fuzz::shown(out).c_str(),
                   fuzz::shown(text).c_str(), e.what(), e.detail().c_str());
    }
    const std::vector<unsigned char> again = fuzz::packed(reparsed);
    FUZZ_CHECK(again == bytes, "in(out(x)) != x: \"%s\" -> \"%s\" reads back as a different value",
               fuzz::shown(text).c_str(), fuzz::shown(out).c_str());
    const tres::View again_view(again.data(), again.size());
    FUZZ_CHECK(fuzz::formatted(again_view) == out, "canonical text of \"%s\" is not stable",
               fuzz::shown(out).c_str());
    return 0;
}
