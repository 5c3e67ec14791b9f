#include "pg/aggregate.hpp"

namespace hpcacct::pg {

MemoryContext aggregate_context(FunctionCallInfo fcinfo, const char* aggregate) {
    MemoryContext context = nullptr;
    if (!AggCheckCallContext(fcinfo, &context)) {
        ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
                        errmsg("this function can only be called as part of the aggregate %s", aggregate)));
    }
    return context;
}

void require_argument(FunctionCallInfo fcinfo, int argno, const char* aggregate, const char* name, const char* hint) {
    if (PG_ARGISNULL(argno)) {
        ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("%s: %s must not be NULL", aggregate, name),
                        hint != nullptr ? errhint("%s", hint) : 0));
    }
}

StringInfoData serialized_state(FunctionCallInfo fcinfo, int size, const char* aggregate) {
    bytea* bytes = PG_GETARG_BYTEA_PP(0);
    const int actual = VARSIZE_ANY_EXHDR(bytes);
    if (actual != size) {
        ereport(ERROR, (errcode(ERRCODE_INVALID_BINARY_REPRESENTATION),
                        errmsg("invalid %s state: %d bytes instead of %d", aggregate, actual, size)));
    }
    StringInfoData buffer;
    buffer.data = VARDATA_ANY(bytes);
    buffer.len = actual;
    buffer.maxlen = actual;
    buffer.cursor = 0;
    return buffer;
}

}  // namespace hpcacct::pg
