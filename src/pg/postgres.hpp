// The PostgreSQL headers, with C linkage. Only src/pg/ includes this.
#pragma once

extern "C" {
#include "postgres.h"

#include "fmgr.h"
}
