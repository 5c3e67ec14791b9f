// SQL area: the hpcacct.tres type — text and binary I/O, operators, btree and hash support.
#include "pg/tres_datum.hpp"

extern "C" {
#include "common/hashfn.h"
#include "libpq/pqformat.h"
#include "utils/builtins.h"
}

#include <cstring>

using hpcacct::pg::Across;
using hpcacct::pg::guarded;
using hpcacct::pg::tres_arg;
using hpcacct::pg::tres_datum;
namespace tres = hpcacct::tres;

namespace {

// The comparison and hash functions free what they detoast: btree and hash call them in
// long-lived contexts (a sort, an index build), where each copy would stay until the end.
varlena* detoasted(FunctionCallInfo fcinfo, int argno) { return PG_DETOAST_DATUM_PACKED(PG_GETARG_DATUM(argno)); }

void free_if_copy(FunctionCallInfo fcinfo, int argno, varlena* value) { PG_FREE_IF_COPY(value, argno); }

tres::View view_of(const varlena* value) {
    const auto* data = reinterpret_cast<const unsigned char*>(VARDATA_ANY(value));
    const std::size_t size = VARSIZE_ANY_EXHDR(value);
    return guarded([&] { return tres::View(data, size); });
}

int compare_args(FunctionCallInfo fcinfo) {
    varlena* a = detoasted(fcinfo, 0);
    varlena* b = detoasted(fcinfo, 1);
    const tres::View view_a = view_of(a);
    const tres::View view_b = view_of(b);
    const int order = guarded([&] { return tres::compare(view_a, view_b); });
    free_if_copy(fcinfo, 0, a);
    free_if_copy(fcinfo, 1, b);
    return order;
}

// Canonical values compare equal exactly when their bytes do.
bool equal_args(FunctionCallInfo fcinfo) {
    varlena* a = detoasted(fcinfo, 0);
    varlena* b = detoasted(fcinfo, 1);
    const std::size_t size = VARSIZE_ANY_EXHDR(a);
    const bool equal = size == VARSIZE_ANY_EXHDR(b) && std::memcmp(VARDATA_ANY(a), VARDATA_ANY(b), size) == 0;
    free_if_copy(fcinfo, 0, a);
    free_if_copy(fcinfo, 1, b);
    return equal;
}

Datum scaled(FunctionCallInfo fcinfo, int tres_argno, int factor_argno) {
    const tres::View value = tres_arg(fcinfo, tres_argno);
    const double factor = PG_GETARG_FLOAT8(factor_argno);
    Across<tres::Vector> result;  // lives across ereport and palloc
    guarded([&] { tres::scale(value, factor, result); });
    return tres_datum(result);
}

}  // namespace

extern "C" {

PG_FUNCTION_INFO_V1(hpcacct_tres_in);
Datum hpcacct_tres_in(PG_FUNCTION_ARGS) {
    const char* text = PG_GETARG_CSTRING(0);
    const std::size_t length = std::strlen(text);
    Across<tres::Vector> result;  // lives across ereport and palloc
    guarded([&] { tres::parse(std::string_view(text, length), result); });
    return tres_datum(result);
}

PG_FUNCTION_INFO_V1(hpcacct_tres_out);
Datum hpcacct_tres_out(PG_FUNCTION_ARGS) {
    const tres::View value = tres_arg(fcinfo, 0);
    const std::size_t length = guarded([&] { return tres::format_length(value); });
    char* out = static_cast<char*>(palloc(length + 1));
    guarded([&] { tres::format(value, out, length + 1); });
    PG_RETURN_CSTRING(out);
}

// Binary form: int32 count, then per component int32 key length, the key, float8 value.
// Everything received is validated as text input is.
PG_FUNCTION_INFO_V1(hpcacct_tres_recv);
Datum hpcacct_tres_recv(PG_FUNCTION_ARGS) {
    StringInfo buffer = reinterpret_cast<StringInfo>(PG_GETARG_POINTER(0));
    const int count = pq_getmsgint(buffer, 4);
    if (count < 0 || static_cast<std::size_t>(count) > tres::kMaxComponents) {
        ereport(ERROR, (errcode(ERRCODE_INVALID_BINARY_REPRESENTATION),
                        errmsg("invalid tres component count %d in binary input", count)));
    }
    Across<tres::Vector> result;  // lives across ereport and palloc
    for (int i = 0; i < count; ++i) {
        const int raw_length = pq_getmsgint(buffer, 4);
        if (raw_length <= 0 || static_cast<std::size_t>(raw_length) > tres::kMaxKeyLength) {
            ereport(ERROR, (errcode(ERRCODE_INVALID_BINARY_REPRESENTATION),
                            errmsg("invalid tres key length %d in binary input", raw_length)));
        }
        int key_length = 0;
        const char* key = pq_getmsgtext(buffer, raw_length, &key_length);
        const double value = pq_getmsgfloat8(buffer);
        guarded([&] { tres::insert_checked(result, std::string_view(key, key_length), value); });
    }
    return tres_datum(result);
}

PG_FUNCTION_INFO_V1(hpcacct_tres_send);
Datum hpcacct_tres_send(PG_FUNCTION_ARGS) {
    const tres::View value = tres_arg(fcinfo, 0);
    StringInfoData buffer;
    pq_begintypsend(&buffer);
    pq_sendint32(&buffer, static_cast<int32>(value.size()));
    tres::View::Cursor cursor = value.cursor();
    while (cursor.next()) {
        pq_sendint32(&buffer, static_cast<int32>(cursor.key().size()));
        pq_sendtext(&buffer, cursor.key().data(), static_cast<int>(cursor.key().size()));
        pq_sendfloat8(&buffer, cursor.value());
    }
    PG_RETURN_BYTEA_P(pq_endtypsend(&buffer));
}

PG_FUNCTION_INFO_V1(hpcacct_tres_get);
Datum hpcacct_tres_get(PG_FUNCTION_ARGS) {
    const tres::View value = tres_arg(fcinfo, 0);
    text* key = PG_GETARG_TEXT_PP(1);
    const std::string_view name(VARDATA_ANY(key), VARSIZE_ANY_EXHDR(key));
    PG_RETURN_FLOAT8(value.get(name));
}

PG_FUNCTION_INFO_V1(hpcacct_tres_add);
Datum hpcacct_tres_add(PG_FUNCTION_ARGS) {
    const tres::View a = tres_arg(fcinfo, 0);
    const tres::View b = tres_arg(fcinfo, 1);
    Across<tres::Vector> result;  // lives across ereport and palloc
    guarded([&] { tres::add(a, b, result); });
    return tres_datum(result);
}

PG_FUNCTION_INFO_V1(hpcacct_tres_mul);
Datum hpcacct_tres_mul(PG_FUNCTION_ARGS) { return scaled(fcinfo, 0, 1); }

PG_FUNCTION_INFO_V1(hpcacct_tres_mul_left);
Datum hpcacct_tres_mul_left(PG_FUNCTION_ARGS) { return scaled(fcinfo, 1, 0); }

PG_FUNCTION_INFO_V1(hpcacct_tres_eq);
Datum hpcacct_tres_eq(PG_FUNCTION_ARGS) { PG_RETURN_BOOL(equal_args(fcinfo)); }

PG_FUNCTION_INFO_V1(hpcacct_tres_ne);
Datum hpcacct_tres_ne(PG_FUNCTION_ARGS) { PG_RETURN_BOOL(!equal_args(fcinfo)); }

PG_FUNCTION_INFO_V1(hpcacct_tres_lt);
Datum hpcacct_tres_lt(PG_FUNCTION_ARGS) { PG_RETURN_BOOL(compare_args(fcinfo) < 0); }

PG_FUNCTION_INFO_V1(hpcacct_tres_le);
Datum hpcacct_tres_le(PG_FUNCTION_ARGS) { PG_RETURN_BOOL(compare_args(fcinfo) <= 0); }

PG_FUNCTION_INFO_V1(hpcacct_tres_gt);
Datum hpcacct_tres_gt(PG_FUNCTION_ARGS) { PG_RETURN_BOOL(compare_args(fcinfo) > 0); }

PG_FUNCTION_INFO_V1(hpcacct_tres_ge);
Datum hpcacct_tres_ge(PG_FUNCTION_ARGS) { PG_RETURN_BOOL(compare_args(fcinfo) >= 0); }

PG_FUNCTION_INFO_V1(hpcacct_tres_cmp);
Datum hpcacct_tres_cmp(PG_FUNCTION_ARGS) { PG_RETURN_INT32(compare_args(fcinfo)); }

PG_FUNCTION_INFO_V1(hpcacct_tres_hash);
Datum hpcacct_tres_hash(PG_FUNCTION_ARGS) {
    varlena* value = detoasted(fcinfo, 0);
    const Datum hash = hash_any(reinterpret_cast<const unsigned char*>(VARDATA_ANY(value)),
                                static_cast<int>(VARSIZE_ANY_EXHDR(value)));
    free_if_copy(fcinfo, 0, value);
    return hash;
}

PG_FUNCTION_INFO_V1(hpcacct_tres_hash_extended);
Datum hpcacct_tres_hash_extended(PG_FUNCTION_ARGS) {
    varlena* value = detoasted(fcinfo, 0);
    const Datum hash = hash_any_extended(reinterpret_cast<const unsigned char*>(VARDATA_ANY(value)),
                                         static_cast<int>(VARSIZE_ANY_EXHDR(value)), PG_GETARG_INT64(1));
    free_if_copy(fcinfo, 0, value);
    return hash;
}

}  // extern "C"
