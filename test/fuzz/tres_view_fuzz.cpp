// tres packed bytes (tres::View, which the glue builds over every stored tres datum), and the
// operations that read Views: format, get, compare, add, scale and the charge functions.
//
// Input: [factor: 8 bytes double][split: 2 bytes][a: split bytes][b: the rest]; a and b are
// copied into buffers of their exact size, so that ASan sees any read past their end.
// Properties:
//  - View construction over arbitrary bytes either throws hpcacct::Error or gives a view whose
//    cursor yields exactly size() components inside the buffer;
//  - format_length is the length format writes; on canonical values compare is antisymmetric
//    and compare(a, a) = 0 (a corrupt value may hold a NaN);
//  - add, scale and the charge functions either throw hpcacct::Error or succeed, and whatever a
//    Vector holds packs into bytes that make a valid View again;
//  - a View that is canonical (valid ascending keys, finite values in (0, kMaxValue]) prints as
//    text that parses back to the identical bytes.
#include "fuzz_support.hpp"

#include "core/charge.hpp"

#include <optional>

namespace tres = hpcacct::tres;
namespace charge = hpcacct::charge;
using hpcacct::Error;

namespace {

std::optional<tres::View> view_of(const std::vector<unsigned char>& bytes) {
    try {
        return tres::View(bytes.data(), bytes.size());
    } catch (const Error&) {
        return std::nullopt;
    }
}

bool canonical(const tres::View& v) {
    tres::View::Cursor c = v.cursor();
    std::string previous;
    bool first = true;
    while (c.next()) {
        if (!tres::valid_key(c.key())) return false;
        if (!first && !(previous < c.key())) return false;
        if (!(std::isfinite(c.value()) && c.value() > 0 && c.value() <= tres::kMaxValue)) return false;
        previous = std::string(c.key());
        first = false;
    }
    return true;
}

void check_view(const tres::View& v, const std::vector<unsigned char>& bytes) {
    std::size_t count = 0;
    tres::View::Cursor c = v.cursor();
    const unsigned char* end = bytes.data() + bytes.size();
    while (c.next()) {
        ++count;
        const auto* key = reinterpret_cast<const unsigned char*>(c.key().data());
        FUZZ_CHECK(key >= bytes.data() && key + c.key().size() <= end, "key outside the buffer");
        (void)v.get(c.key());
    }
    FUZZ_CHECK(count == v.size(), "cursor yields %zu components, size() is %zu", count, v.size());
    const int self = tres::compare(v, v);  // a NaN of a corrupt value may differ from itself
    const std::string text = fuzz::formatted(v);
    if (!canonical(v)) return;
    FUZZ_CHECK(self == 0, "a value differs from itself");
    tres::Vector reparsed;
    try {
        tres::parse(text, reparsed);
    } catch (const Error& e) {
        FUZZ_CHECK(false, "canonical value prints as \"%s\", which does not parse: %s (%s)",
                   fuzz::shown(text).c_str(), e.what(), e.detail().c_str());
    }
    FUZZ_CHECK(fuzz::packed(reparsed) == bytes, "in(out(x)) != x for \"%s\"", fuzz::shown(text).c_str());
}

// A Vector built by an operation must pack into a valid View.
void check_result(const tres::Vector& v) {
    const std::vector<unsigned char> bytes = fuzz::packed(v);
    std::optional<tres::View> view = view_of(bytes);
    FUZZ_CHECK(view.has_value(), "a computed vector of %zu components packs into an invalid View", v.size());
    (void)fuzz::formatted(*view);
}

template <typename F>
void attempt(F&& f) {
    try {
        f();
    } catch (const Error&) {
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    fuzz::Reader in(data, size);
    const double factor = in.take<double>();
    const std::size_t split = in.take<std::uint16_t>();
    const std::string_view first = in.bytes(split);
    const std::string_view second = in.rest();
    const std::vector<unsigned char> a_bytes(first.begin(), first.end());
    const std::vector<unsigned char> b_bytes(second.begin(), second.end());

    const std::optional<tres::View> a = view_of(a_bytes);
    const std::optional<tres::View> b = view_of(b_bytes);
    if (a) check_view(*a, a_bytes);
    if (b) check_view(*b, b_bytes);
    if (a) {
        attempt([&] {
            tres::Vector scaled;
            tres::scale(*a, factor, scaled);
            check_result(scaled);
        });
    }
    if (!a || !b) return 0;

    const int ab = tres::compare(*a, *b);
    const int ba = tres::compare(*b, *a);
    if (canonical(*a) && canonical(*b)) {
        FUZZ_CHECK(ab == -ba && ab >= -1 && ab <= 1, "compare(a, b) = %d but compare(b, a) = %d", ab, ba);
    }
    attempt([&] {
        tres::Vector sum;
        tres::add(*a, *b, sum);
        check_result(sum);
    });
    attempt([&] { (void)charge::equivalents(*a, *b); });
    attempt([&] { (void)charge::whole_nodes(*a, *b); });
    attempt([&] { (void)charge::exclusive_equivalents(*a, *b, *a); });
    attempt([&] { (void)charge::job_charge(*a, factor, *b, 1.0, &*a); });
    attempt([&] { (void)charge::job_charge(*a, 1.0, *b, factor, nullptr); });
    return 0;
}
