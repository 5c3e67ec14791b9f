#include "pg/aggregate.hpp"

namespace hpcacct::pg {

void not_in_aggregate(const char* aggregate) {
    ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
                    errmsg("this function can only be called as part of the aggregate %s", aggregate)));
    pg_unreachable();
}

void null_argument(const char* aggregate, const char* name, const char* hint) {
    ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("%s: %s must not be NULL", aggregate, name),
                    hint != nullptr ? errhint("%s", hint) : 0));
    pg_unreachable();
}

StringInfoData serialized_state(FunctionCallInfo fcinfo, int size, const char* aggregate) {
    bytea* bytes = PG_GETARG_BYTEA_PP(0);
    const int actual = VARSIZE_ANY_EXHDR(bytes);
    const int format = actual > 0 ? static_cast<unsigned char>(*VARDATA_ANY(bytes)) : -1;
    if (format != kStateFormat) {
        ereport(ERROR, (errcode(ERRCODE_INVALID_BINARY_REPRESENTATION),
                        errmsg("invalid %s state: format %d instead of %d", aggregate, format, kStateFormat)));
    }
    if (actual != 1 + size) {
        ereport(ERROR, (errcode(ERRCODE_INVALID_BINARY_REPRESENTATION),
                        errmsg("invalid %s state: %d bytes instead of %d", aggregate, actual, 1 + size)));
    }
    StringInfoData buffer;
    buffer.data = VARDATA_ANY(bytes);
    buffer.len = actual;
    buffer.maxlen = actual;
    buffer.cursor = 1;  // after the format byte
    return buffer;
}

}  // namespace hpcacct::pg
