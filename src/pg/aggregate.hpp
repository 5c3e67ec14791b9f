// Support functions shared by the aggregates whose state is one of the core's flat structs,
// kept as `internal` in the aggregate's memory context and updated in place. Every support
// function first checks that it runs inside an aggregate (AggCheckCallContext).
#pragma once

#include "pg/postgres.hpp"

#include "pg/guard.hpp"

extern "C" {
#include "lib/stringinfo.h"
#include "libpq/pqformat.h"
}

#include "core/theoretical.hpp"

#include <cstring>
#include <type_traits>

namespace hpcacct::pg {

// The errors of the two checks below, out of line.
[[noreturn]] void not_in_aggregate(const char* aggregate);
[[noreturn]] void null_argument(const char* aggregate, const char* name, const char* hint);

// The aggregate's memory context; an error (0A000) unless called as part of an aggregate.
// Inline, as the next one: transition functions call them for every row.
inline MemoryContext aggregate_context(FunctionCallInfo fcinfo, const char* aggregate) {
    MemoryContext context = nullptr;
    if (unlikely(!AggCheckCallContext(fcinfo, &context))) not_in_aggregate(aggregate);
    return context;
}

// A NULL argument is an error (22004) naming it, not a row silently left out.
inline void require_argument(FunctionCallInfo fcinfo, int argno, const char* aggregate, const char* name,
                             const char* hint = nullptr) {
    if (unlikely(PG_ARGISNULL(argno))) null_argument(aggregate, name, hint);
}

// A zeroed state: for the core's flat structs, all-zero bytes are the empty state.
template <typename State>
State* new_state(MemoryContext context) {
    static_assert(std::is_trivially_copyable_v<State> && std::is_trivially_destructible_v<State>,
                  "aggregate states are flat structs");
    return static_cast<State*>(MemoryContextAllocZero(context, sizeof(State)));
}

// The transition state (argument 0), or a new, empty one on the first row.
template <typename State>
State* transition_state(FunctionCallInfo fcinfo, MemoryContext context) {
    return PG_ARGISNULL(0) ? new_state<State>(context) : reinterpret_cast<State*>(PG_GETARG_POINTER(0));
}

// What a transition function derives from an argument that is the same on every row (the
// evaluation date `at`), kept with its call site (fn_extra, which lives as long as the
// aggregate's FmgrInfo) and derived again only when the argument changes: a constant `at` is
// converted once per query instead of once per row. `derive` may raise an error; nothing is
// kept then.
template <typename Key, typename Value, typename Derive>
Value derived_once(FunctionCallInfo fcinfo, Key key, Derive derive) {
    static_assert(std::is_trivially_copyable_v<Key> && std::is_trivially_copyable_v<Value>);
    struct Cache {
        bool valid;
        Key key;
        Value value;
    };
    auto* cache = static_cast<Cache*>(fcinfo->flinfo->fn_extra);
    if (likely(cache != nullptr && cache->valid && cache->key == key)) return cache->value;
    if (cache == nullptr) {
        cache = static_cast<Cache*>(MemoryContextAllocZero(fcinfo->flinfo->fn_mcxt, sizeof(Cache)));
        fcinfo->flinfo->fn_extra = cache;
    }
    cache->valid = false;
    cache->value = derive(key);
    cache->key = key;
    cache->valid = true;
    return cache->value;
}

// The combine function: merges argument 1 into argument 0. Either may be NULL (a worker that
// saw no row); a state kept from argument 1 is copied into the aggregate's context, since it
// may live in a shorter-lived one.
template <typename State, typename Merge>
Datum combine_states(FunctionCallInfo fcinfo, const char* aggregate, Merge merge) {
    MemoryContext context = aggregate_context(fcinfo, aggregate);
    if (PG_ARGISNULL(1)) {
        if (PG_ARGISNULL(0)) PG_RETURN_NULL();
        PG_RETURN_POINTER(PG_GETARG_POINTER(0));
    }
    const State* other = reinterpret_cast<const State*>(PG_GETARG_POINTER(1));
    if (PG_ARGISNULL(0)) {
        State* copy = new_state<State>(context);
        std::memcpy(copy, other, sizeof(State));
        PG_RETURN_POINTER(copy);
    }
    State* state = reinterpret_cast<State*>(PG_GETARG_POINTER(0));
    guarded([&] { merge(*state, *other); });
    PG_RETURN_POINTER(state);
}

// Serialized states, one convention for every aggregate: a format byte (kStateFormat), then
// the state's fields in declaration order, in network byte order, so that a partial state
// may cross to a node of another architecture (Citus, postgres_fdw) and a state of another
// format is refused rather than misread.
constexpr int kStateFormat = 1;

// A buffer for a serialize function, the format byte written.
inline StringInfoData begin_state() {
    StringInfoData buffer;
    pq_begintypsend(&buffer);
    pq_sendbyte(&buffer, kStateFormat);
    return buffer;
}

inline void send_sum(StringInfo buffer, const theoretical::Sum& sum) {
    pq_sendfloat8(buffer, sum.sum);
    pq_sendfloat8(buffer, sum.compensation);
}

inline void receive_sum(StringInfo buffer, theoretical::Sum& sum) {
    sum.sum = pq_getmsgfloat8(buffer);
    sum.compensation = pq_getmsgfloat8(buffer);
}

// A serialized state (argument 0 of a deserialize function) to read with pq_getmsg*, its
// format byte read: an error (22P03) unless it is of kStateFormat with exactly `size` bytes
// of fields. What is read must still be validated.
StringInfoData serialized_state(FunctionCallInfo fcinfo, int size, const char* aggregate);

}  // namespace hpcacct::pg
