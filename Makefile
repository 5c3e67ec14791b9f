# hpcacct — PGXS build. `make test` and `make demo` do all set-up on a fresh Debian 12 machine.

EXTENSION   = hpcacct
EXTVERSION  = 0.4
MODULE_big  = hpcacct

CORE_SRCS   = $(sort $(wildcard src/core/*.cpp))
GLUE_SRCS   = $(sort $(wildcard src/pg/*.cpp))
# src/core/mail.cpp is hpcacct-notify's; the server uses its mailbox_key() (with libidn2)
OBJS        = $(patsubst %.cpp,%.o,$(CORE_SRCS)) $(GLUE_SRCS:.cpp=.o)

# The current version's install script is assembled from one file per SQL area, in name
# order. sql/versions/ holds an update script from each released version to the next (every
# schema change ships as one) and the frozen install script of 0.1 only: PostgreSQL installs
# any other release from it and the update scripts (test/compat/upgrade.sh tests the chain).
INSTALL_PARTS = $(sort $(wildcard sql/install/*.sql))
DATA_built  = $(EXTENSION)--$(EXTVERSION).sql
DATA        = $(wildcard sql/versions/$(EXTENSION)--*.sql)

# Slurm enforcement (issue 15): hpcacct-slurm-sync goes into PostgreSQL's bindir; the
# job_submit/lua script and an example of its configuration into $(datadir)/hpcacct/
# (`pg_config --sharedir`/hpcacct), from where a site copies them next to slurm.conf.
SCRIPTS     = src/slurm/hpcacct-slurm-sync
SLURM_FILES = src/slurm/job_submit.lua src/slurm/hpcacct_job_submit.conf.example

# setup runs first (it creates the job table), then the rest in name order
REGRESS     = setup $(filter-out setup,$(patsubst sql/%.sql,%,$(sort $(wildcard sql/*.sql))))
REGRESS_OPTS = --load-extension=btree_gist --load-extension=$(EXTENSION)

# The commands, client programs installed into PostgreSQL's bindir: hpcacct-notify, the
# outbox's SMTP sender (libpq, libcurl), hpcacct-sacct, the loader (libpq), and
# hpcacct-report, which writes monthly statements to files (libpq).
NOTIFY_BIN    = src/bin/hpcacct-notify
LOADER        = src/bin/hpcacct-sacct
REPORT_BIN    = src/bin/hpcacct-report
SCRIPTS_built = $(NOTIFY_BIN) $(LOADER) $(REPORT_BIN)

CXXSTD      = -std=c++17
PG_CPPFLAGS = -I$(CURDIR)/src
PG_CXXFLAGS = $(CXXSTD) -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers
IDN2_LIBS   = $(shell pkg-config --libs libidn2 2>/dev/null || echo -lidn2)
SHLIB_LINK  = -lstdc++ $(IDN2_LIBS)
# The commands: compiled against the core and libpq's header, linked with libpq (and the
# sender with libcurl and libidn2); plain by the rules below, sanitized by commands-asan's.
CMD_CXXFLAGS = $(CXXSTD) -Wall -Wextra -DHPCACCT_CORE_BUILD -Isrc -I$(shell $(PG_CONFIG) --includedir)
PQ_LIBS      = -L$(shell $(PG_CONFIG) --libdir) -lpq
NOTIFY_LIBS  = $(PQ_LIBS) $(shell pkg-config --libs libcurl 2>/dev/null || echo -lcurl) $(IDN2_LIBS)
EXTRA_CLEAN = test/unit/run_unit_tests results regression.diffs regression.out $(NOTIFY_BIN) $(LOADER) $(REPORT_BIN)

PG_CONFIG  ?= $(firstword $(wildcard /usr/lib/postgresql/15/bin/pg_config) pg_config)
PGXS       := $(shell $(PG_CONFIG) --pgxs 2>/dev/null)

# On a fresh machine the server headers are not there yet: `make test` installs them first
# and then calls make again, so only the top-level targets below are needed before that.
ifneq ($(wildcard $(PGXS)),)
include $(PGXS)
# The clang bitcode build for JIT ignores PG_CXXFLAGS; without the clang the server was
# built with, skip the bitcode (JIT then simply does not inline our functions).
BITCODE_CXXFLAGS += $(CXXSTD) -I$(CURDIR)/src
ifeq ($(wildcard $(CLANG)),)
with_llvm = no
endif
endif

install: install-slurm
uninstall: uninstall-slurm
.PHONY: install-slurm uninstall-slurm
install-slurm:
	$(MKDIR_P) '$(DESTDIR)$(datadir)/hpcacct'
	$(INSTALL_DATA) $(SLURM_FILES) '$(DESTDIR)$(datadir)/hpcacct/'
uninstall-slurm:
	rm -f $(addprefix '$(DESTDIR)$(datadir)/hpcacct'/, $(notdir $(SLURM_FILES)))

# The core is compiled without PostgreSQL's include path: it cannot include its headers.
CORE_CXXFLAGS = $(CXXSTD) -O2 -g -fPIC -Wall -Wextra -DHPCACCT_CORE_BUILD -Isrc
src/core/%.o: src/core/%.cpp $(wildcard src/core/*.hpp)
	$(CXX) $(CORE_CXXFLAGS) -c -o $@ $<

# The loader links the core's sacct module and libpq (libpq-dev), nothing of the server.
$(LOADER): src/bin/hpcacct-sacct.cpp src/core/sacct.o src/core/sacct.hpp src/core/error.hpp src/bin/pq.hpp
	$(CXX) $(CMD_CXXFLAGS) -O2 -g -o $@ $< src/core/sacct.o $(PQ_LIBS)

# PGXS's own rule knows no header dependencies: the glue is rebuilt when any header changes.
$(GLUE_SRCS:.cpp=.o): $(wildcard src/pg/*.hpp src/core/*.hpp)

# The sender links the core's mail module (header folding, body encoding), libpq, libcurl and
# libidn2 (internationalized domains' A-labels).
$(NOTIFY_BIN): src/bin/hpcacct-notify.cpp src/bin/pq.hpp src/core/mail.o src/core/mail.hpp
	$(CXX) $(CMD_CXXFLAGS) -O2 -g -o $@ $< src/core/mail.o $(NOTIFY_LIBS)

$(REPORT_BIN): src/bin/hpcacct-report.cpp src/bin/pq.hpp src/core/calendar.hpp
	$(CXX) $(CMD_CXXFLAGS) -O2 -g -o $@ $< $(PQ_LIBS)

$(EXTENSION)--$(EXTVERSION).sql: $(INSTALL_PARTS)
	cat $^ > $@

# ---- unit tests of the PostgreSQL-free core (GoogleTest) ----
UNIT_SRCS = $(sort $(wildcard test/unit/*.cpp))
test/unit/run_unit_tests: $(UNIT_SRCS) $(CORE_SRCS) $(wildcard src/core/*.hpp test/unit/*.hpp)
	$(CXX) $(CXXSTD) -O1 -g -Wall -Wextra -DHPCACCT_CORE_BUILD -Isrc -o $@ $(UNIT_SRCS) $(CORE_SRCS) -lgtest -lgtest_main -pthread -lidn2

.PHONY: deps unit test demo
deps:
	test/scripts/install-deps.sh

unit: test/unit/run_unit_tests
	test/unit/run_unit_tests

test:
	PG_CONFIG=$(PG_CONFIG) test/scripts/run-tests.sh

demo:
	PG_CONFIG=$(PG_CONFIG) test/scripts/run-demo.sh

# `make reference`: rewrites the README's reference of every object from the catalog of the
# installed extension (`make install` first); `make test` fails while it differs.
.PHONY: reference
reference:
	PG_CONFIG=$(PG_CONFIG) test/scripts/with-cluster.sh reference test/compat/reference.sh --write

# `make bench`: benchmarks in a throw-away cluster (test/bench/run.sh, test/bench/README.md);
# `make bench JOBS=20000 RUNS=1` is the quick mode that only checks fast paths against references.
JOBS ?= 1000000
SEED ?= 42
RUNS ?= 5
.PHONY: bench
bench:
	PG_CONFIG=$(PG_CONFIG) JOBS=$(JOBS) SEED=$(SEED) RUNS=$(RUNS) test/bench/run.sh
	PG_CONFIG=$(PG_CONFIG) test/slurm/bench-submit.sh $(SUBMITS) $(SUBMIT_ROUNDS)
	PG_CONFIG=$(PG_CONFIG) UPDATE_JOBS=$(UPDATE_JOBS) SEED=$(SEED) test/bench/update.sh
	PG_CONFIG=$(PG_CONFIG) test/bench/claim.sh

# `make bench-update`: what ALTER EXTENSION hpcacct UPDATE from the previous release costs a site
# (test/bench/update.sh); `make bench-update UPDATE_JOBS=1000000 BASELINE=main` measures the
# update script of main beside this one, as in RESULTS.md.
UPDATE_JOBS ?= 100000
.PHONY: bench-update
bench-update:
	PG_CONFIG=$(PG_CONFIG) UPDATE_JOBS=$(UPDATE_JOBS) BASELINE=$(BASELINE) SEED=$(SEED) test/bench/update.sh

# `make bench-curves`: every report and scheduled procedure against the site's size
# (test/bench/curves.sh); e.g. `make bench-curves SIZES=1000000` for one size.
SIZES ?= 1000000 3000000 10000000 10000000:5000000
CURVES_RUNS ?= 3
.PHONY: bench-curves
bench-curves:
	PG_CONFIG=$(PG_CONFIG) SIZES="$(SIZES)" SEED=$(SEED) RUNS=$(CURVES_RUNS) test/bench/curves.sh

# `make bench-submit`: job_submit/lua's check against a plugin that checks nothing, in a real Slurm
SUBMITS ?= 200
SUBMIT_ROUNDS ?= 3
.PHONY: bench-submit
bench-submit:
	PG_CONFIG=$(PG_CONFIG) test/slurm/bench-submit.sh $(SUBMITS) $(SUBMIT_ROUNDS)

# ---- sanitizers and fuzzing of the core (clang-14: libFuzzer, AddressSanitizer, UBSan) ----
# `make unit-asan` runs the GoogleTest binary built with ASan (+ LeakSanitizer) and UBSan;
# `make fuzz` runs every test/fuzz/*_fuzz.cpp target for FUZZ_SECONDS, `make fuzz-smoke` (part
# of `make test`) for FUZZ_SMOKE_SECONDS. Seeds: test/fuzz/corpus/TARGET/; what the fuzzers
# add, and any crash reproducer, goes under test/fuzz/build/.
SAN_CXX            ?= clang++-14
SAN_FLAGS           = -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
FUZZ_CXXFLAGS       = $(CXXSTD) -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
                      -fno-omit-frame-pointer -DHPCACCT_CORE_BUILD -Isrc
FUZZ_SECONDS       ?= 60
FUZZ_SMOKE_SECONDS ?= 3
FUZZ_BUILD          = test/fuzz/build
FUZZ_TARGETS        = $(patsubst test/fuzz/%.cpp,%,$(sort $(wildcard test/fuzz/*_fuzz.cpp)))
FUZZ_BINS           = $(addprefix $(FUZZ_BUILD)/,$(FUZZ_TARGETS))
FUZZ_CORE_OBJS      = $(patsubst src/core/%.cpp,$(FUZZ_BUILD)/core/%.o,$(CORE_SRCS))
EXTRA_CLEAN        += test/unit/run_unit_tests_asan $(FUZZ_BUILD)

test/unit/run_unit_tests_asan: $(UNIT_SRCS) $(CORE_SRCS) $(wildcard src/core/*.hpp test/unit/*.hpp)
	$(SAN_CXX) $(CXXSTD) -O1 -g $(SAN_FLAGS) -Wall -Wextra -DHPCACCT_CORE_BUILD -Isrc -o $@ $(UNIT_SRCS) $(CORE_SRCS) -lgtest -lgtest_main -pthread -lidn2

$(FUZZ_BUILD)/core/%.o: src/core/%.cpp $(wildcard src/core/*.hpp)
	@mkdir -p $(@D)
	$(SAN_CXX) $(FUZZ_CXXFLAGS) -c -o $@ $<

$(FUZZ_BUILD)/%_fuzz: test/fuzz/%_fuzz.cpp $(FUZZ_CORE_OBJS) $(wildcard test/fuzz/*.hpp test/unit/date_forms.hpp test/unit/mail_decode.hpp) $(wildcard src/core/*.hpp)
	@mkdir -p $(@D)
	$(SAN_CXX) $(FUZZ_CXXFLAGS) -o $@ $< $(FUZZ_CORE_OBJS)

# `make commands-asan`: the three commands built with ASan (+ LeakSanitizer) and UBSan into
# $(CMDS_ASAN)/, their core modules compiled with them. `make install-commands-asan` puts them
# into PG_CONFIG's bindir, where the harnesses find them (a private install tree only: `make
# install` puts the plain ones back). README, Testing, says how to run a harness with them.
CMDS_ASAN       = build/commands-asan
CMDS_ASAN_FLAGS = $(CMD_CXXFLAGS) -O1 -g $(SAN_FLAGS)
CMDS_ASAN_BINS  = $(CMDS_ASAN)/hpcacct-sacct $(CMDS_ASAN)/hpcacct-notify $(CMDS_ASAN)/hpcacct-report
EXTRA_CLEAN    += build

$(CMDS_ASAN)/hpcacct-sacct: src/bin/hpcacct-sacct.cpp src/core/sacct.cpp src/core/sacct.hpp src/core/error.hpp
	@mkdir -p $(@D)
	$(SAN_CXX) $(CMDS_ASAN_FLAGS) -o $@ src/bin/hpcacct-sacct.cpp src/core/sacct.cpp $(PQ_LIBS)

$(CMDS_ASAN)/hpcacct-notify: src/bin/hpcacct-notify.cpp src/bin/pq.hpp src/core/mail.cpp src/core/mail.hpp
	@mkdir -p $(@D)
	$(SAN_CXX) $(CMDS_ASAN_FLAGS) -o $@ src/bin/hpcacct-notify.cpp src/core/mail.cpp $(NOTIFY_LIBS)

$(CMDS_ASAN)/hpcacct-report: src/bin/hpcacct-report.cpp src/bin/pq.hpp src/core/calendar.hpp
	@mkdir -p $(@D)
	$(SAN_CXX) $(CMDS_ASAN_FLAGS) -o $@ src/bin/hpcacct-report.cpp $(PQ_LIBS)

.PHONY: commands-asan install-commands-asan
commands-asan: $(CMDS_ASAN_BINS)

install-commands-asan: $(CMDS_ASAN_BINS)
	$(INSTALL_PROGRAM) $(CMDS_ASAN_BINS) '$(DESTDIR)$(bindir)/'

.PHONY: unit-asan fuzz-build fuzz fuzz-smoke
unit-asan: test/unit/run_unit_tests_asan
	ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1 \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 test/unit/run_unit_tests_asan

fuzz-build: $(FUZZ_BINS)

fuzz: fuzz-build
	test/fuzz/run.sh $(FUZZ_SECONDS) $(FUZZ_TARGETS)

fuzz-smoke: fuzz-build
	test/fuzz/run.sh $(FUZZ_SMOKE_SECONDS) $(FUZZ_TARGETS)
