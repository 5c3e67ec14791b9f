#!/usr/bin/env bash
# make demo: install what is missing, build, install, then load a sample site with
# generated jobs into a throw-away cluster and print what an administrator looks at first.
set -euo pipefail
cd "$(dirname "$0")/../.."

test/scripts/install-deps.sh
export PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
make -s PG_CONFIG=$PG_CONFIG all >/dev/null
make -s PG_CONFIG=$PG_CONFIG install >/dev/null

export HPCACCT_CRON_DATABASE=hpcacct_demo
test/scripts/with-cluster.sh demo bash -c '
    createdb hpcacct_demo
    for part in test/demo/*.sql; do
        psql -X -q -v ON_ERROR_STOP=1 -d hpcacct_demo -f "$part" || exit 1
    done
'
