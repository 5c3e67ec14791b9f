#!/usr/bin/env bash
# test/slurm/job_modify.sh: job_submit.lua's slurm_job_modify under Lua 5.1 with a stand-in for
# slurmctld's `slurm` table (no Slurm, no database: an account is not changed here). A comment
# starting "hpcacct: " marks hpcacct-slurm-sync's hold, so only root or SlurmUser (slurmctld's
# uid, this process's here) may write one; an owner who wrote it back after an operator replaced
# it would have the sync lift the operator's hold. Prints TAP lines, appends "jobmodify PASSED
# FAILED" to $HPCACCT_TALLY (when set); exits 1 on a failure.
set -uo pipefail
cd "$(dirname "$0")/../.."
work=$(mktemp -d "${TMPDIR:-/tmp}/hpcacct-job-modify.XXXXXX")
trap 'rm -rf "$work"' EXIT
: >"$work/hpcacct_job_submit.conf"
HPCACCT_JOB_SUBMIT_CONF=$work/hpcacct_job_submit.conf lua5.1 - "$(id -u)" >"$work/tap" <<'LUA'
slurm = { SUCCESS = 0, ERROR = -1, ESLURM_ACCESS_DENIED = 2002,
          log_info = function() end, log_error = function() end, log_user = function() end }
package.preload["luasql.postgres"] = function() error("no database in this test") end
dofile("src/slurm/job_submit.lua")
local me = tonumber(arg[1])
local n, failed = 0, 0
local function is(got, want, what)
    n = n + 1
    if got == want then print("ok " .. n .. " - " .. what)
    else failed = failed + 1; print("not ok " .. n .. " - " .. what .. " (got " .. tostring(got) .. ")") end
end
local job = { user_id = 1000 }
is(slurm_job_modify({ comment = "hpcacct: account p1 has a negative balance" }, job, nil, 1000), 2002,
   "the owner (uid 1000) cannot write a comment starting \"hpcacct: \"")
is(slurm_job_modify({ comment = "hpcacct: x", account = nil }, job, nil, 4242), 2002, "nor can another user")
is(slurm_job_modify({ comment = "mine: hpcacct: x" }, job, nil, 1000), 0, "the owner writes any other comment")
is(slurm_job_modify({ comment = "" }, job, nil, 1000), 0, "and clears it")
is(slurm_job_modify({ priority = 5 }, job, nil, 1000), 0, "an update without a comment is not concerned")
is(slurm_job_modify({ comment = "hpcacct: account p1 has a negative balance" }, job, nil, 0), 0,
   "root (hpcacct-slurm-sync) writes it")
is(slurm_job_modify({ comment = "hpcacct: account p1 has a negative balance" }, job, nil, me), 0,
   "so does slurmctld's own uid (SlurmUser)")
print("1.." .. n)
os.exit(failed == 0 and 0 or 1)
LUA
status=$?
cat "$work/tap"
ok=$(grep -c '^ok ' "$work/tap") bad=$(grep -c '^not ok ' "$work/tap")
[ "$status" -ne 0 ] && [ "$bad" -eq 0 ] && bad=1   # Lua died before its checks
[ -n "${HPCACCT_TALLY:-}" ] && echo "jobmodify $ok $bad" >>"$HPCACCT_TALLY"
exit $(( bad > 0 ))
