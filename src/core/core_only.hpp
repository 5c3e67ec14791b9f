// Included by every core header. The core is built without PostgreSQL's include path
// (see the Makefile), and with HPCACCT_CORE_BUILD defined, so it cannot reach postgres.h.
#pragma once

#if defined(HPCACCT_CORE_BUILD) && defined(POSTGRES_H)
#error "src/core must stay free of PostgreSQL headers"
#endif
