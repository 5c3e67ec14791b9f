// C entry points under their names of earlier releases. The frozen install script of 0.1
// (sql/versions/hpcacct--0.1.sql), the base of every update path, creates its functions with
// these names, and PostgreSQL looks each one up in this library when it creates the function;
// the update to 0.4 replaces them by the current names. Keep each until no frozen script
// names it.
#include "pg/postgres.hpp"

extern "C" {

// 0.1 .. 0.3: the support functions of hpcacct.tmc and hpcacct.tc (now with the suffixes
// every aggregate's support functions have: _combinefn, _finalfn, _serialfn, _deserialfn).
Datum hpcacct_theoretical_combinefn(PG_FUNCTION_ARGS);
Datum hpcacct_theoretical_finalfn(PG_FUNCTION_ARGS);
Datum hpcacct_theoretical_serialfn(PG_FUNCTION_ARGS);
Datum hpcacct_theoretical_deserialfn(PG_FUNCTION_ARGS);

PG_FUNCTION_INFO_V1(hpcacct_theoretical_combine);
Datum hpcacct_theoretical_combine(PG_FUNCTION_ARGS) { return hpcacct_theoretical_combinefn(fcinfo); }

PG_FUNCTION_INFO_V1(hpcacct_theoretical_final);
Datum hpcacct_theoretical_final(PG_FUNCTION_ARGS) { return hpcacct_theoretical_finalfn(fcinfo); }

PG_FUNCTION_INFO_V1(hpcacct_theoretical_serialize);
Datum hpcacct_theoretical_serialize(PG_FUNCTION_ARGS) { return hpcacct_theoretical_serialfn(fcinfo); }

PG_FUNCTION_INFO_V1(hpcacct_theoretical_deserialize);
Datum hpcacct_theoretical_deserialize(PG_FUNCTION_ARGS) { return hpcacct_theoretical_deserialfn(fcinfo); }

}  // extern "C"
