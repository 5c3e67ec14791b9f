// Hints for errors that PostgreSQL raises on hpcacct's behalf and that cannot carry one of
// their own: a duplicate job in hpcacct.job is a unique violation of its key, raised by the
// index long before any trigger of ours runs (a BEFORE ROW trigger that looked first would
// cost every COPY a lookup per job). emit_log_hook sees the error on its way to the client
// and adds what to do instead.
//
// The library is loaded before any job row is inserted (the alloctres column's input
// function is ours), so the hook is in place when a duplicate arrives. It runs inside error
// reporting: it only compares fields and copies a constant string, and calls the hook that
// was installed before it.
#include "pg/postgres.hpp"

extern "C" {
#include "utils/elog.h"
#include "utils/memutils.h"
}

#include <cstring>

namespace {

emit_log_hook_type previous_emit_log_hook = nullptr;

constexpr char kDuplicateJobHint[] =
    "This job is already loaded, and every job is charged once. To load a file that repeats jobs, skip those "
    "already there: INSERT INTO hpcacct.job ... ON CONFLICT DO NOTHING (e.g. from a staging table; it needs only "
    "the INSERT right). A job whose record changed is corrected by an administrator with UPDATE, which re-charges it.";

bool is(const char* field, const char* value) {
    return field != nullptr && std::strcmp(field, value) == 0;
}

void add_hints(ErrorData* edata) {
    if (edata->elevel >= ERROR && edata->sqlerrcode == ERRCODE_UNIQUE_VIOLATION && edata->hint == nullptr &&
        is(edata->schema_name, "hpcacct") && is(edata->table_name, "job")) {
        edata->hint = MemoryContextStrdup(edata->assoc_context, kDuplicateJobHint);
    }
    if (previous_emit_log_hook != nullptr) previous_emit_log_hook(edata);
}

}  // namespace

extern "C" {
PGDLLEXPORT void _PG_init(void);

void _PG_init(void) {
    previous_emit_log_hook = emit_log_hook;
    emit_log_hook = add_hints;
}
}
