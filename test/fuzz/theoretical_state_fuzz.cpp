// The state of tmc and tc (theoretical::State): validate, merge and Sum::value on states read
// byte for byte (as theoretical_deserialfn fills them), and accept_row.
//
// Input: [state a: 24 bytes][state b: 24 bytes][at: int32], then rows of
// [at - row's at: int8][convention: 1 byte][summand: double].
// Properties:
//  - merge of two states validate() accepts either throws, leaving the first as it was, or
//    gives a valid state; merge(a, b) and merge(b, a) fail alike unless a sum overflows;
//  - every row accept_row and Sum::add accept leaves a state validate() accepts; a refused
//    row changes nothing.
#include "state_support.hpp"

#include "core/theoretical.hpp"

namespace theoretical = hpcacct::theoretical;
using theoretical::State;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    fuzz::Reader in(data, size);
    const State a = fuzz::read_state<State>(in);
    const State b = fuzz::read_state<State>(in);
    const auto validate = [](const State& s) { theoretical::validate(s); };
    if (fuzz::succeeds([&] { validate(a); }) && fuzz::succeeds([&] { validate(b); })) {
        State ab = a, ba = b;
        const auto ab_error = fuzz::error_of([&] { theoretical::merge(ab, b); });
        const auto ba_error = fuzz::error_of([&] { theoretical::merge(ba, a); });
        if (ab_error) FUZZ_CHECK(fuzz::same_bytes(ab, a), "a refused merge changed the state");
        if (!ab_error) FUZZ_CHECK(fuzz::succeeds([&] { validate(ab); }), "validate refuses a merge of valid states");
        if (ab_error != hpcacct::ErrorKind::out_of_range && ba_error != hpcacct::ErrorKind::out_of_range) {
            FUZZ_CHECK(ab_error == ba_error, "merge(a, b) and merge(b, a) disagree");
        }
        if (!ab_error) fuzz::attempt([&] { return ab.sum.value(); });
    }

    const std::int32_t at = in.take<std::int32_t>();
    State all{};
    while (in.remaining() > 0) {
        const std::int64_t row_at = static_cast<std::int64_t>(at) + in.take<std::int8_t>();
        const auto convention = in.byte() % 2 == 0 ? theoretical::MonthConvention::half_month
                                                   : theoretical::MonthConvention::day;
        const double summand = in.take<double>();
        if (row_at < hpcacct::calendar::kFirstDay || row_at > hpcacct::calendar::kLastDay) continue;
        fuzz::accumulate_checked(all, validate, [&](State& s) {
            // as the transition function: the row's date and convention, then its figure
            State next = s;
            theoretical::accept_row(next, static_cast<std::int32_t>(row_at), convention);
            next.sum.add(summand);
            s = next;
        });
    }
    return 0;
}
