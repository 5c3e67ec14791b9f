// The one exception boundary between the C++ core and PostgreSQL.
//
// Every C++ call made from an SQL entry point runs inside guarded(): a C++ exception is
// caught there, its message copied into a plain buffer, the try scope left (so every C++
// destructor has run), and only then is ereport(ERROR) raised with a real SQLSTATE.
// Nothing PostgreSQL can longjmp out of (palloc, ereport, SPI, CHECK_FOR_INTERRUPTS) is
// called inside a guarded body, and what a body returns must be trivially destructible.
#pragma once

#include "core/error.hpp"

#include <exception>
#include <new>
#include <type_traits>

namespace hpcacct::pg {

// What lives across a PostgreSQL call must need no destructor: ereport and PG_TRY leave by
// longjmp, which runs no C++ destructor, and palloc'd memory (aggregate states, fn_extra
// caches) is freed with its memory context, never destroyed. The glue declares such objects
// as Across<T> (a local that an ereport may jump over) or gets them through aggregate.hpp's
// new_state / state_arg / derived_once, all of which check this at compile time.
template <typename T>
inline constexpr bool survives_longjmp_v = std::is_trivially_destructible_v<T>;

template <typename T>
struct CheckedAcross {
    static_assert(survives_longjmp_v<T>,
                  "an object that lives across a PostgreSQL call (ereport, PG_TRY, palloc) must be trivially "
                  "destructible");
    using type = T;
};
template <typename T>
using Across = typename CheckedAcross<T>::type;

// Filled in by exactly one capture function, which sets every field. It is left
// uninitialised until then: guarded() runs once per row in the aggregates, and zeroing its
// 1.5 KB on every call (no error) used to be a quarter of their cost.
struct PendingError {
    ErrorKind kind;
    bool out_of_memory;
    char message[512];
    char detail[1024];
};

// The SQLSTATE (an ERRCODE_* value) an error of this kind is raised with.
int sqlstate_of(ErrorKind kind);

void capture(PendingError& pending, const Error& error) noexcept;
void capture_out_of_memory(PendingError& pending) noexcept;
void capture_unexpected(PendingError& pending, const char* what) noexcept;
[[noreturn]] void raise(const PendingError& pending);

template <typename Body>
auto guarded(Body&& body) -> decltype(body()) {
    using Result = decltype(body());
    static_assert(std::is_void_v<Result> || survives_longjmp_v<Result>,
                  "a guarded body must not return an object with a destructor");
    Across<PendingError> pending;  // set by a capture function before raise() reads it
    try {
        return body();
    } catch (const Error& e) {
        capture(pending, e);
    } catch (const std::bad_alloc&) {
        capture_out_of_memory(pending);
    } catch (const std::exception& e) {
        capture_unexpected(pending, e.what());
    } catch (...) {
        capture_unexpected(pending, "unknown C++ exception");
    }
    raise(pending);
}

}  // namespace hpcacct::pg
