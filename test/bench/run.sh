#!/usr/bin/env bash
# make bench: install what is missing, build, install, then benchmark hpcacct against
# PostgreSQL's own costs in a throw-away cluster (a fresh mktemp -d directory) and print one table.
#
#   JOBS=1000000  jobs of the synthetic site (10 000 000 works on 2 cores / 24 GiB)
#   SEED=42       seed of the generator: the same seed and ANCHOR give the same site
#   RUNS=5        timed runs per case (median); BUDGET seconds per case group stops early
#   ANCHOR=date   the site's "today" (default: today); jobs end before it, 3 years back
#   CHECK=1       also check that every fast path agrees with its reference (exit 1 if not)
#   CASES=regex   run only the case groups whose name matches (e.g. CASES='^(tc|ingest)')
#   FEDERATION=0  skip the federation bench (test/federation/bench.sh: a centre and two sites)
#
# Quick mode (what `make test` can run): JOBS=20000 RUNS=1 test/bench/run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."

test/scripts/install-deps.sh
export PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
make -s PG_CONFIG=$PG_CONFIG all >/dev/null
# Installing touches the shared PostgreSQL installation: one engineer at a time (a lock on that
# installation's extension directory; no lock file of its own)
flock "$($PG_CONFIG --sharedir)/extension" make -s PG_CONFIG=$PG_CONFIG install >/dev/null

export JOBS=${JOBS:-1000000} SEED=${SEED:-42} RUNS=${RUNS:-5}
test/scripts/with-cluster.sh bench test/bench/driver.sh
# Several clusters: charging at a site with replication on against off, and the lag at that rate
if [ "${FEDERATION:-1}" = 1 ]; then test/federation/bench.sh; fi
