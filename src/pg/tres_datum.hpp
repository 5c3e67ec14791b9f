// Conversions between the tres varlena and the core's View / Vector.
#pragma once

#include "pg/postgres.hpp"

#include "core/tres.hpp"
#include "pg/guard.hpp"

namespace hpcacct::pg {

// A detoasted tres argument as a core View; validates the packed layout.
inline tres::View tres_arg(FunctionCallInfo fcinfo, int argno) {
    varlena* value = PG_DETOAST_DATUM_PACKED(PG_GETARG_DATUM(argno));
    const auto* data = reinterpret_cast<const unsigned char*>(VARDATA_ANY(value));
    const std::size_t size = VARSIZE_ANY_EXHDR(value);
    return guarded([&] { return tres::View(data, size); });
}

// A new tres datum holding `vector`, in the current memory context.
inline Datum tres_datum(const tres::Vector& vector) {
    const std::size_t size = vector.packed_size();
    auto* result = static_cast<varlena*>(palloc(VARHDRSZ + size));
    SET_VARSIZE(result, VARHDRSZ + size);
    vector.pack(reinterpret_cast<unsigned char*>(VARDATA(result)));
    return PointerGetDatum(result);
}

}  // namespace hpcacct::pg
