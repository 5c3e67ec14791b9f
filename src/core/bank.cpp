#include "core/bank.hpp"

#include "core/error.hpp"

#include <cmath>
#include <string>

namespace hpcacct::bank {
namespace {

// The ledger books amounts to 6 decimals. A sum of huge amounts can overflow: that is an
// error, not an infinite balance.
double to_booked_precision(double value) {
    if (!std::isfinite(value)) throw Error(ErrorKind::out_of_range, "quarter balance is out of range");
    const double rounded = std::round(value * 1e6) / 1e6;
    if (!std::isfinite(rounded)) return value;  // too large to have 6 decimals anyway
    return rounded == 0 ? 0.0 : rounded;  // never -0
}

theoretical::Sum& sum_of(State& state, EntryKind kind) {
    switch (kind) {
        case EntryKind::deposit: return state.deposits;
        case EntryKind::charge: return state.charges;
        case EntryKind::transfer: return state.transfers;
        case EntryKind::refund: break;
    }
    return state.refunds;
}

bool finite_sum(const theoretical::Sum& s) { return std::isfinite(s.sum) && std::isfinite(s.compensation); }

}  // namespace

EntryKind parse_entry_kind(std::string_view text) {
    if (text == "deposit") return EntryKind::deposit;
    if (text == "charge") return EntryKind::charge;
    if (text == "transfer") return EntryKind::transfer;
    if (text == "refund") return EntryKind::refund;
    throw Error(ErrorKind::invalid_argument, "\"" + std::string(text) + "\" is not a bank entry kind",
                "The quarterly bank counts deposit, charge, transfer and refund entries.");
}

int quarter_of_month(int month_index) {
    // floor division, so that months before year 0 fall in the right quarter (written so that
    // no step overflows, down to INT_MIN)
    return month_index >= 0 ? month_index / 3 : -1 - (-(month_index + 1)) / 3;
}

void accumulate(State& state, EntryKind kind, int entry_month, double amount, int at_month) {
    if (!std::isfinite(amount)) throw Error(ErrorKind::out_of_range, "bank entry amount must be finite");
    const int at_quarter = quarter_of_month(at_month);
    if (state.at_set && state.at_quarter != at_quarter) {
        throw Error(ErrorKind::invalid_argument, "all rows of a quarter_balance must name the same quarter");
    }
    if (quarter_of_month(entry_month) == at_quarter) sum_of(state, kind).add(amount);
    state.at_quarter = at_quarter;
    state.at_set = 1;
    ++state.rows;
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
    state.deposits.merge(other.deposits);
    state.charges.merge(other.charges);
    state.transfers.merge(other.transfers);
    state.refunds.merge(other.refunds);
    state.rows = rows;
}

void validate(const State& state) {
    const bool sums_ok = finite_sum(state.deposits) && finite_sum(state.charges) && finite_sum(state.transfers) &&
                         finite_sum(state.refunds);
    const bool shape_ok = state.rows >= 0 && (state.at_set == 0 || state.at_set == 1) &&
                          (state.rows == 0 || state.at_set == 1);
    if (!sums_ok || !shape_ok) throw Error(ErrorKind::internal, "corrupt quarter_balance state");
}

Balance finish(const State& state) {
    Balance b{};
    b.quarter = state.at_quarter;
    b.deposits = to_booked_precision(state.deposits.value());
    b.charges = to_booked_precision(state.charges.value());
    b.transfers = to_booked_precision(state.transfers.value());
    b.refunds = to_booked_precision(state.refunds.value());
    b.balance = to_booked_precision(state.deposits.value() + state.transfers.value() + state.refunds.value() -
                                    state.charges.value());
    return b;
}

}  // namespace hpcacct::bank
