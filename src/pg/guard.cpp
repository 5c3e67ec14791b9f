#include "pg/postgres.hpp"

#include "pg/guard.hpp"

#include <cstdio>

namespace hpcacct::pg {

int sqlstate_of(ErrorKind kind) {
    switch (kind) {
        case ErrorKind::invalid_text: return ERRCODE_INVALID_TEXT_REPRESENTATION;
        case ErrorKind::out_of_range: return ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE;
        case ErrorKind::invalid_datetime: return ERRCODE_DATETIME_FIELD_OVERFLOW;
        case ErrorKind::invalid_argument: return ERRCODE_INVALID_PARAMETER_VALUE;
        case ErrorKind::undefined_object: return ERRCODE_UNDEFINED_OBJECT;
        case ErrorKind::program_limit: return ERRCODE_PROGRAM_LIMIT_EXCEEDED;
        case ErrorKind::internal: break;
    }
    return ERRCODE_INTERNAL_ERROR;
}

namespace {

void copy_text(char* out, std::size_t capacity, const char* text) noexcept {
    std::snprintf(out, capacity, "%s", text);
}

}  // namespace

void capture(PendingError& pending, const Error& error) noexcept {
    pending.kind = error.kind();
    pending.out_of_memory = false;
    copy_text(pending.message, sizeof pending.message, error.what());
    copy_text(pending.detail, sizeof pending.detail, error.detail().c_str());
}

void capture_out_of_memory(PendingError& pending) noexcept {
    pending.kind = ErrorKind::internal;
    pending.out_of_memory = true;
    copy_text(pending.message, sizeof pending.message, "out of memory in hpcacct");
    pending.detail[0] = '\0';
}

void capture_unexpected(PendingError& pending, const char* what) noexcept {
    pending.kind = ErrorKind::internal;
    pending.out_of_memory = false;
    std::snprintf(pending.message, sizeof pending.message, "unexpected error in hpcacct: %s", what);
    pending.detail[0] = '\0';
}

void raise(const PendingError& pending) {
    const int sqlstate = pending.out_of_memory ? ERRCODE_OUT_OF_MEMORY : sqlstate_of(pending.kind);
    ereport(ERROR, (errcode(sqlstate), errmsg("%s", pending.message),
                    pending.detail[0] != '\0' ? errdetail("%s", pending.detail) : 0));
    pg_unreachable();
}

}  // namespace hpcacct::pg
