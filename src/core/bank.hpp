// The quarterly bank, HLRN (rules §4): an account's balance in one calendar quarter.
//
// balance(q) = deposits(q) + transfers(q) + refunds(q) - charges(q). Credits do not carry
// over: only entries of the quarter count. Charges are positive (a reversal is negative);
// transfers are signed (in positive, out negative). The caller has already attributed each
// entry to a quarter (charges pro rata by wall-clock time).
#pragma once
#include "core/core_only.hpp"

#include "core/theoretical.hpp"

#include <cstdint>
#include <string_view>
#include <type_traits>

namespace hpcacct::bank {

enum class EntryKind { deposit, charge, transfer, refund };

// "deposit", "charge", "transfer" or "refund"; anything else is Error(invalid_argument).
EntryKind parse_entry_kind(std::string_view text);

// Quarters counted as year * 4 + (quarter - 1), from month indexes (year * 12 + month - 1).
int quarter_of_month(int month_index);

// Aggregate state; all-zero is the empty state.
struct State {
    std::int64_t rows;
    std::int32_t at_quarter;
    std::int32_t at_set;
    theoretical::Sum deposits;
    theoretical::Sum charges;
    theoretical::Sum transfers;
    theoretical::Sum refunds;
};
static_assert(std::is_trivially_copyable_v<State> && std::is_standard_layout_v<State>);

// Adds one ledger entry attributed to `entry_month` (any month of its quarter); it counts
// when that quarter is the quarter of `at_month`. Throws Error(out_of_range) on a
// non-finite amount, Error(invalid_argument) if at_month's quarter differs from earlier rows'.
void accumulate(State& state, EntryKind kind, int entry_month, double amount, int at_month);

// Combine function; an empty state is the identity.
void merge(State& state, const State& other);

// Throws Error(internal) unless accumulate/merge could have built `state`.
void validate(const State& state);

struct Balance {
    int quarter;  // quarter index of `at`
    double deposits, charges, transfers, refunds, balance;
};

// Amounts are booked to 6 decimals, so the sums are rounded to 6 decimals: a balance that
// is exactly zero in the ledger is never reported as a tiny negative number.
// Throws Error(out_of_range) when a sum or the balance overflows a double.
Balance finish(const State& state);

}  // namespace hpcacct::bank
