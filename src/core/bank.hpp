// The quarterly bank, HLRN (rules §4): an account's balance in one calendar quarter.
//
// balance(q) = deposits(q) + transfers(q) + refunds(q) - charges(q). Credits do not carry
// over: only entries of the quarter count. Charges are positive (a reversal is negative);
// transfers are signed (in positive, out negative). The caller has already attributed each
// entry to a quarter (charges pro rata by wall-clock time).
//
// Exact: amounts are counted in integer micro-units (the ledger's 6 decimals), so a balance
// is the same digits as the ledger's numeric sum; an input with more decimals (a pro-rata
// share) is rounded to micro-units half away from zero as it enters, as round(x, 6) does.
#pragma once
#include "core/core_only.hpp"

#include <cstdint>
#include <string_view>
#include <type_traits>

namespace hpcacct::bank {

enum class EntryKind { deposit, charge, transfer, refund };

// "deposit", "charge", "transfer" or "refund"; anything else is Error(invalid_argument).
EntryKind parse_entry_kind(std::string_view text);

// Quarters counted as year * 4 + (quarter - 1), from month indexes (year * 12 + month - 1).
int quarter_of_month(int month_index);

// A decimal number as PostgreSQL's numeric prints it ("-12.3456789", "7", "0.5") in
// micro-units, rounded half away from zero after the sixth decimal. Throws
// Error(out_of_range) beyond an int64 of micro-units (about 9.2e12) and for NaN and
// infinities, Error(invalid_text) for anything that is not such a number.
std::int64_t parse_micro_units(std::string_view decimal);

// A float8 amount (quarter_balance of hpcacct 0.3, until ALTER EXTENSION UPDATE) in
// micro-units, rounded half away from zero; Error(out_of_range) when not finite or too large.
std::int64_t micro_units_of_double(double amount);

// Aggregate state; all-zero is the empty state. Sums in micro-units.
struct State {
    std::int64_t rows;
    std::int32_t at_quarter;
    std::int32_t at_set;
    std::int64_t deposits;
    std::int64_t charges;
    std::int64_t transfers;
    std::int64_t refunds;
};
static_assert(std::is_trivially_copyable_v<State> && std::is_standard_layout_v<State>);

// Adds one ledger entry of `micro` micro-units attributed to `entry_month` (any month of its
// quarter); it counts when that quarter is the quarter of `at_month`. Throws
// Error(out_of_range) when a sum overflows (nothing changed then), Error(invalid_argument) if
// at_month's quarter differs from earlier rows'.
void accumulate(State& state, EntryKind kind, int entry_month, std::int64_t micro, int at_month);

// Combine function; an empty state is the identity. Error(out_of_range) when a sum overflows.
void merge(State& state, const State& other);

// Throws Error(internal) unless accumulate/merge could have built `state`.
void validate(const State& state);

// In micro-units.
struct Balance {
    int quarter;  // quarter index of `at`
    std::int64_t deposits, charges, transfers, refunds, balance;
};

// balance = deposits + transfers + refunds - charges; Error(out_of_range) when it overflows.
Balance finish(const State& state);

}  // namespace hpcacct::bank
