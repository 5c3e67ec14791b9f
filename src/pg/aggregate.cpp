#include "pg/aggregate.hpp"

extern "C" {
#include "access/htup_details.h"
// funcapi.h reaches the spinlock headers, whose `register` C++17 rejects with a warning.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wregister"
#include "funcapi.h"
#pragma GCC diagnostic pop
}

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

TupleDesc composite_result(FunctionCallInfo fcinfo, const char* function, const char* type_name,
                           std::initializer_list<Oid> types, const char* detail) {
    TupleDesc desc = nullptr;
    if (get_call_result_type(fcinfo, nullptr, &desc) != TYPEFUNC_COMPOSITE) {
        ereport(ERROR, (errcode(ERRCODE_DATATYPE_MISMATCH), errmsg("%s must return a composite type", function)));
    }
    bool layout_ok = desc->natts == static_cast<int>(types.size());
    int i = 0;
    for (const Oid type : types) {
        if (!layout_ok) break;
        const Form_pg_attribute attribute = TupleDescAttr(desc, i++);
        layout_ok = !attribute->attisdropped && attribute->atttypid == type;
    }
    if (!layout_ok) {
        ereport(ERROR, (errcode(ERRCODE_DATATYPE_MISMATCH),
                        errmsg("type %s does not have the fields %s returns", type_name, function),
                        detail != nullptr ? errdetail("%s", detail) : 0));
    }
    return desc;
}

Datum composite_datum(TupleDesc desc, Datum* values, bool* nulls) {
    return HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(desc), values, nulls));
}

}  // namespace hpcacct::pg
