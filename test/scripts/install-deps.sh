#!/usr/bin/env bash
# Installs the Debian 12 packages hpcacct builds and tests with, in one apt-get call,
# and only when one of them is missing.
set -euo pipefail

packages=(
    postgresql-15 postgresql-server-dev-15 postgresql-15-pgtap libtap-parser-sourcehandler-pgtap-perl
    libboost-date-time-dev postgresql-15-cron libgtest-dev make g++ libpq-dev
    clang-14 libclang-rt-14-dev
)

missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "hpcacct: installing ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
    echo "hpcacct: these packages are missing; run as root, or install them: apt-get install ${missing[*]}" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q "${packages[@]}"
