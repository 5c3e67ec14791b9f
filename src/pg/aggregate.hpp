// Support functions shared by the aggregates whose state is one of the core's flat structs,
// kept as `internal` in the aggregate's memory context and updated in place. Every support
// function first checks that it runs inside an aggregate (AggCheckCallContext).
#pragma once

#include "pg/postgres.hpp"

#include "pg/guard.hpp"

extern "C" {
#include "access/tupdesc.h"
#include "lib/stringinfo.h"
#include "libpq/pqformat.h"
}

#include "core/theoretical.hpp"

#include <cstring>
#include <initializer_list>
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

// Aggregate states are the core's flat structs: palloc'd, copied byte for byte, never destroyed.
template <typename State>
using FlatState = Across<State>;
template <typename State>
inline constexpr bool flat_state_v = std::is_trivially_copyable_v<FlatState<State>>;

// Arguments 1, 2, ... of a transition function, named in order: each must not be NULL.
inline void require_arguments(FunctionCallInfo fcinfo, const char* aggregate, std::initializer_list<const char*> names,
                              const char* hint = nullptr) {
    int argno = 1;
    for (const char* name : names) require_argument(fcinfo, argno++, aggregate, name, hint);
}

// A zeroed state: for the core's flat structs, all-zero bytes are the empty state.
template <typename State>
State* new_state(MemoryContext context) {
    static_assert(flat_state_v<State>, "aggregate states are flat structs");
    return static_cast<State*>(MemoryContextAllocZero(context, sizeof(State)));
}

// The state passed as argument `argno` (internal, not NULL).
template <typename State>
State* state_arg(FunctionCallInfo fcinfo, int argno) {
    static_assert(flat_state_v<State>, "aggregate states are flat structs");
    return reinterpret_cast<State*>(PG_GETARG_POINTER(argno));
}

// The transition state (argument 0), or a new, empty one on the first row.
template <typename State>
State* transition_state(FunctionCallInfo fcinfo, MemoryContext context) {
    return PG_ARGISNULL(0) ? new_state<State>(context) : state_arg<State>(fcinfo, 0);
}

// What a transition function derives from an argument that is the same on every row (the
// evaluation date `at`), kept with its call site (fn_extra, which lives as long as the
// aggregate's FmgrInfo) and derived again only when the argument changes: a constant `at` is
// converted once per query instead of once per row. `derive` may raise an error; nothing is
// kept then.
template <typename Key, typename Value, typename Derive>
Value derived_once(FunctionCallInfo fcinfo, Key key, Derive derive) {
    static_assert(std::is_trivially_copyable_v<Across<Key>> && std::is_trivially_copyable_v<Across<Value>>,
                  "what fn_extra keeps is palloc'd and never destroyed");
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
    const State* other = state_arg<State>(fcinfo, 1);
    if (PG_ARGISNULL(0)) {
        State* copy = new_state<State>(context);
        std::memcpy(copy, other, sizeof(State));
        PG_RETURN_POINTER(copy);
    }
    State* state = state_arg<State>(fcinfo, 0);
    guarded([&] { merge(*state, *other); });
    PG_RETURN_POINTER(state);
}

// The state a final function finishes, or nullptr when the aggregate saw no row.
template <typename State>
const State* final_state(FunctionCallInfo fcinfo, const char* aggregate) {
    aggregate_context(fcinfo, aggregate);
    return PG_ARGISNULL(0) ? nullptr : state_arg<const State>(fcinfo, 0);
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

// A serialize function: the format byte, then what `send(StringInfo, const State&)` writes.
template <typename State, typename Send>
Datum serialize_state(FunctionCallInfo fcinfo, const char* aggregate, Send send) {
    aggregate_context(fcinfo, aggregate);
    StringInfoData buffer = begin_state();
    send(&buffer, *state_arg<const State>(fcinfo, 0));
    PG_RETURN_BYTEA_P(pq_endtypsend(&buffer));
}

// A deserialize function: checks the format and the exact `size`, reads the fields with
// `receive(StringInfo, State&)`, then `validate(const State&)` (a core function, guarded)
// checks they make a state the transition and combine functions could have built. The state
// lives in the current (per-call) context; combine_states copies it when it keeps it.
template <typename State, typename Receive, typename Validate>
Datum deserialize_state(FunctionCallInfo fcinfo, const char* aggregate, int size, Receive receive,
                        Validate validate) {
    aggregate_context(fcinfo, aggregate);
    StringInfoData buffer = serialized_state(fcinfo, size, aggregate);
    State* state = new_state<State>(CurrentMemoryContext);
    receive(&buffer, *state);
    pq_getmsgend(&buffer);
    guarded([&] { validate(*state); });
    PG_RETURN_POINTER(state);
}

// The composite type a final function returns, checked to have exactly the fields `types`
// (not dropped) that the C code fills: an error (42804) naming `type_name` otherwise.
TupleDesc composite_result(FunctionCallInfo fcinfo, const char* function, const char* type_name,
                           std::initializer_list<Oid> types, const char* detail = nullptr);

// A row of that type, as a Datum.
Datum composite_datum(TupleDesc desc, Datum* values, bool* nulls);

}  // namespace hpcacct::pg
