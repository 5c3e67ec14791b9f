#!/usr/bin/env bash
# Installs the Debian 12 packages hpcacct builds and tests with, in one apt-get call,
# and only when one of them is missing.
set -euo pipefail

packages=(
    postgresql-15 postgresql-server-dev-15 postgresql-15-pgtap libtap-parser-sourcehandler-pgtap-perl
    libboost-date-time-dev postgresql-15-cron libgtest-dev make g++ libpq-dev
    clang-14 libclang-rt-14-dev
    # test/slurm: a real Slurm on localhost, its accounting database and munge
    slurmctld slurmd slurmdbd slurm-client slurm-wlm-basic-plugins munge mariadb-server mariadb-client
    # for job_submit/lua: Debian's job_submit_lua.so links liblua5.1; lua-sql-postgres serves 5.1-5.4
    lua5.1 liblua5.1-0 lua-sql-postgres
    # hpcacct-sacct, hpcacct-notify (libpq, libcurl, libidn2); the SMTP sink, Chromium and ImageMagick of test/notify
    libpq-dev libcurl4-openssl-dev libidn2-dev python3-aiosmtpd chromium imagemagick openssl
    # make bench: the loader rounds' client CPU time (/usr/bin/time)
    time
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
# Debian's munge, mariadb-server and slurm packages start their system services on install:
# a policy-rc.d that says 101 keeps them all down (test/slurm starts its own, privately).
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
    trap 'rm -f "$policy"' EXIT
    trap 'exit 130' INT TERM
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod 755 "$policy"
fi
apt-get update -q
apt-get install -y -q "${packages[@]}"
# no system service of theirs may be running (test/slurm runs its own, elsewhere)
for pidfile in /run/munge/munged.pid /run/mysqld/mysqld.pid /run/slurmdbd.pid /run/slurmctld.pid /run/slurmd.pid; do
    if [ -s "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
        echo "hpcacct: warning: a system service runs, pid file $pidfile" >&2
    fi
done
