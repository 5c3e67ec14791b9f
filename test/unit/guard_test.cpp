// The glue's compile-time rule (src/pg/guard.hpp): what lives across a PostgreSQL call must be
// trivially destructible. guard.hpp includes no PostgreSQL header, so its trait is checked here
// on the types the glue keeps across calls, and on types it must refuse.
#include "pg/guard.hpp"

#include "core/bank.hpp"
#include "core/fairshare.hpp"
#include "core/theoretical.hpp"
#include "core/tres.hpp"
#include "core/window_quota.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

namespace {

using hpcacct::pg::survives_longjmp_v;

// Every aggregate state and every local the glue declares as Across<T>.
static_assert(survives_longjmp_v<hpcacct::bank::State>);
static_assert(survives_longjmp_v<hpcacct::window_quota::State>);
static_assert(survives_longjmp_v<hpcacct::fairshare::HalfLifeState>);
static_assert(survives_longjmp_v<hpcacct::fairshare::IntervalState>);
static_assert(survives_longjmp_v<hpcacct::theoretical::Sum>);
static_assert(survives_longjmp_v<hpcacct::tres::Vector>);
static_assert(survives_longjmp_v<hpcacct::pg::PendingError>);

// What a longjmp would leak or leave half-destroyed.
static_assert(!survives_longjmp_v<std::string>);
static_assert(!survives_longjmp_v<std::vector<double>>);
static_assert(!survives_longjmp_v<std::unique_ptr<int>>);
static_assert(!survives_longjmp_v<hpcacct::Error>);

TEST(Guard, AcrossIsTheTypeItself) {
    static_assert(std::is_same_v<hpcacct::pg::Across<hpcacct::tres::Vector>, hpcacct::tres::Vector>);
    SUCCEED();
}

}  // namespace
