// tres binary input (tres::insert_checked, behind hpcacct_internal.tres_recv, which reads a count and
// then (key length, key, float8) per component).
//
// Input: records of [key length: 1 byte][key][value: 8 bytes, native double].
// Properties:
//  - insert_checked either accepts a component or throws hpcacct::Error;
//  - whatever it accepted is canonical (valid ascending keys, finite values in (0, kMaxValue]);
//  - the value prints as text that tres::parse reads back to the identical packed bytes: a value
//    received in binary survives pg_dump's text form (in(out(x)) = x).
#include "fuzz_support.hpp"

namespace tres = hpcacct::tres;
using hpcacct::Error;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    fuzz::Reader in(data, size);
    tres::Vector received;
    try {
        // The glue refuses a count above kMaxComponents before reading; a few more records
        // let the fuzzer reach insert's own limit.
        for (std::size_t i = 0; i < tres::kMaxComponents + 2 && in.remaining() > 0; ++i) {
            const std::size_t key_length = in.byte();
            const std::string_view key = in.bytes(key_length);
            const double value = in.take<double>();
            tres::insert_checked(received, key, value);
        }
    } catch (const Error&) {
        return 0;
    }

    for (std::size_t i = 0; i < received.size(); ++i) {
        const tres::Component& c = received[i];
        FUZZ_CHECK(tres::valid_key(c.name()), "invalid key \"%s\" accepted", fuzz::shown(c.name()).c_str());
        FUZZ_CHECK(i == 0 || received[i - 1].name() < c.name(), "keys out of order");
        FUZZ_CHECK(std::isfinite(c.value) && c.value > 0 && c.value <= tres::kMaxValue, "value %.17g accepted",
                   c.value);
    }

    const std::vector<unsigned char> bytes = fuzz::packed(received);
    const tres::View view(bytes.data(), bytes.size());
    const std::string text = fuzz::formatted(view);
    tres::Vector reparsed;
    try {
        tres::parse(text, reparsed);
    } catch (const Error& e) {
        FUZZ_CHECK(false, "text \"%s\" of a received value does not parse: %s (%s)", fuzz::shown(text).c_str(),
                   e.what(), e.detail().c_str());
    }
    const std::vector<unsigned char> again = fuzz::packed(reparsed);
    if (again != bytes) {
        std::string values;
        for (std::size_t i = 0; i < received.size(); ++i) {
            char item[200];
            std::snprintf(item, sizeof item, " %s=%a", fuzz::shown(received[i].name()).c_str(), received[i].value);
            values += item;
        }
        FUZZ_CHECK(false, "in(out(x)) != x: received%s, printed \"%s\"", values.c_str(), fuzz::shown(text).c_str());
    }
    return 0;
}
