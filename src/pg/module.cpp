// The library's magic block, once per shared library: PostgreSQL checks it when it loads us.
#include "pg/postgres.hpp"

extern "C" {
PG_MODULE_MAGIC;
}
