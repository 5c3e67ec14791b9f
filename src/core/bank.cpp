#include "core/bank.hpp"

#include "core/error.hpp"

#include <cmath>
#include <string>

namespace hpcacct::bank {
namespace {

[[noreturn]] void out_of_range() { throw Error(ErrorKind::out_of_range, "quarter balance is out of range"); }

std::int64_t checked_add(std::int64_t a, std::int64_t b) {
    std::int64_t sum;
    if (__builtin_add_overflow(a, b, &sum)) out_of_range();
    return sum;
}

std::int64_t& sum_of(State& state, EntryKind kind) {
    switch (kind) {
        case EntryKind::deposit: return state.deposits;
        case EntryKind::charge: return state.charges;
        case EntryKind::transfer: return state.transfers;
        case EntryKind::refund: break;
    }
    return state.refunds;
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

}  // namespace

EntryKind parse_entry_kind(std::string_view text) {
    if (text == "deposit") return EntryKind::deposit;
    if (text == "charge") return EntryKind::charge;
    if (text == "transfer") return EntryKind::transfer;
    if (text == "refund") return EntryKind::refund;
    throw Error(ErrorKind::invalid_argument, "\"" + excerpt(text) + "\" is not a bank entry kind",
                "The quarterly bank counts deposit, charge, transfer and refund entries.");
}

std::int64_t parse_micro_units(std::string_view decimal) {
    if (decimal == "NaN" || decimal == "Infinity" || decimal == "-Infinity") {
        throw Error(ErrorKind::out_of_range, "bank entry amount must be finite");
    }
    std::size_t i = 0;
    const bool negative = !decimal.empty() && decimal[0] == '-';
    if (negative) ++i;
    const std::size_t digits_start = i;
    // magnitude in micro-units, accumulated as a negative number so that INT64_MIN fits
    std::int64_t magnitude = 0;
    for (; i < decimal.size() && is_digit(decimal[i]); ++i) {
        if (__builtin_mul_overflow(magnitude, 10, &magnitude) ||
            __builtin_sub_overflow(magnitude, decimal[i] - '0', &magnitude)) {
            out_of_range();
        }
    }
    bool any_digit = i > digits_start;
    int decimals = 0;
    bool round_away = false;
    if (i < decimal.size() && decimal[i] == '.') {
        ++i;
        for (; i < decimal.size() && is_digit(decimal[i]); ++i, ++decimals) {
            any_digit = true;
            if (decimals < 6) {
                if (__builtin_mul_overflow(magnitude, 10, &magnitude) ||
                    __builtin_sub_overflow(magnitude, decimal[i] - '0', &magnitude)) {
                    out_of_range();
                }
            } else if (decimals == 6) {
                round_away = decimal[i] >= '5';  // half away from zero: the seventh decimal decides
            }
        }
    }
    if (!any_digit || i != decimal.size()) {
        throw Error(ErrorKind::invalid_text, "\"" + excerpt(decimal) + "\" is not a decimal amount");
    }
    for (; decimals < 6; ++decimals) {
        if (__builtin_mul_overflow(magnitude, 10, &magnitude)) out_of_range();
    }
    if (round_away && __builtin_sub_overflow(magnitude, 1, &magnitude)) out_of_range();
    if (negative) return magnitude;
    if (magnitude == INT64_MIN) out_of_range();
    return -magnitude;
}

std::int64_t micro_units_of_double(double amount) {
    const double scaled = std::round(amount * 1e6);
    // 2^63 is exactly representable; every double below it in magnitude fits an int64
    if (!std::isfinite(scaled) || scaled >= 9223372036854775808.0 || scaled < -9223372036854775808.0) {
        throw Error(ErrorKind::out_of_range, "bank entry amount must be finite and below 9.2e12");
    }
    return static_cast<std::int64_t>(scaled);
}

int quarter_of_month(int month_index) {
    // floor division, so that months before year 0 fall in the right quarter (written so that
    // no step overflows, down to INT_MIN)
    return month_index >= 0 ? month_index / 3 : -1 - (-(month_index + 1)) / 3;
}

void accumulate(State& state, EntryKind kind, int entry_month, std::int64_t micro, int at_month) {
    const int at_quarter = quarter_of_month(at_month);
    if (state.at_set && state.at_quarter != at_quarter) {
        throw Error(ErrorKind::invalid_argument, "all rows of a quarter_balance must name the same quarter");
    }
    std::int64_t rows;
    if (__builtin_add_overflow(state.rows, 1, &rows)) {
        throw Error(ErrorKind::program_limit, "too many rows for a quarter_balance");
    }
    if (quarter_of_month(entry_month) == at_quarter) {
        std::int64_t& sum = sum_of(state, kind);
        sum = checked_add(sum, micro);
    }
    state.at_quarter = at_quarter;
    state.at_set = 1;
    state.rows = rows;
}

void merge(State& state, const State& other) {
    if (other.rows == 0) return;
    if (state.rows == 0) {
        state = other;
        return;
    }
    if (state.at_quarter != other.at_quarter) {
        throw Error(ErrorKind::invalid_argument, "all rows of a quarter_balance must name the same quarter");
    }
    std::int64_t rows;  // states read from bytes may hold any count validate() accepts
    if (__builtin_add_overflow(state.rows, other.rows, &rows)) {
        throw Error(ErrorKind::program_limit, "too many rows for a quarter_balance");
    }
    // all sums first, so that an overflow leaves the state as it was
    const State merged{rows,
                       state.at_quarter,
                       state.at_set,
                       checked_add(state.deposits, other.deposits),
                       checked_add(state.charges, other.charges),
                       checked_add(state.transfers, other.transfers),
                       checked_add(state.refunds, other.refunds)};
    state = merged;
}

void validate(const State& state) {
    const bool shape_ok = state.rows >= 0 && (state.at_set == 0 || state.at_set == 1) &&
                          (state.rows == 0 || state.at_set == 1);
    if (!shape_ok) throw Error(ErrorKind::internal, "corrupt quarter_balance state");
}

Balance finish(const State& state) {
    // in 128 bits, so that only a balance that does not fit is an error, not a partial sum
    const __int128 exact = static_cast<__int128>(state.deposits) + state.transfers + state.refunds - state.charges;
    if (exact > INT64_MAX || exact < INT64_MIN) out_of_range();
    return Balance{state.at_quarter, state.deposits, state.charges, state.transfers, state.refunds,
                   static_cast<std::int64_t>(exact)};
}

}  // namespace hpcacct::bank
