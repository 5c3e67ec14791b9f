--[[
hpcacct's job_submit/lua for Slurm: every submission (and every change of a pending job's
account) is decided by hpcacct.check_submit() in the accounting database. A refusal is shown
to the user by sbatch/srun/salloc with check_submit's message.

Install (README "Slurm enforcement"): copy this file as job_submit.lua into the directory of
slurm.conf, set JobSubmitPlugins=lua in slurm.conf, write the configuration below into
hpcacct_job_submit.conf next to it (or name another file in HPCACCT_JOB_SUBMIT_CONF in
slurmctld's environment), and restart slurmctld (or `scontrol reconfigure`).

Configuration, one `key = value` a line, `#` starts a comment:
  conninfo       libpq connection string of the accounting database, in keyword = value
                 form, e.g. host=db.example.org dbname=acct user=slurm_submit connect_timeout=2
                 (a role in hpcacct_submit; a password belongs in a file only SlurmUser reads,
                 passfile=/etc/slurm/hpcacct.pgpass, mode 0600); the
                 script adds options (statement_timeout) and application_name to it, and
                 connect_timeout=2 and client_encoding=UTF8 (Slurm's names are UTF-8,
                 whatever the login's or the database's default) unless it sets them
  on_db_error    open   (default) accept the job and log an error when the database cannot
                        be reached or answers with an error;
                 closed refuse the job with a message saying so
  retry_seconds  after a failed connection, wait this long before connecting again (default
                 10); meanwhile on_db_error decides at once, so slurmctld never waits for a
                 dead database at every submission
  statement_timeout_ms  the check's time limit in the database (default 2000)
  set_account    yes (default): a job that names no account gets the one hpcacct chose (the
                 user's default project, HLRN); no: leave it to Slurm's default account, which
                 is then the account checked
  exempt_users   comma-separated user names never checked (e.g. slurm operators); default none

The script keeps one connection for slurmctld's lifetime and reconnects when a query fails;
on each connection it prepares the check once (PREPARE), and each submission is one EXECUTE:
one round trip, nothing parsed or planned again.
It needs luasql.postgres for Lua 5.1 (Debian: lua-sql-postgres), the Lua version Debian's
job_submit_lua.so is linked against.
]]

local NAME = "hpcacct"

-- ---- configuration ----------------------------------------------------------------------

local function script_dir()
    local source = debug.getinfo(1, "S").source or ""
    return (source:match("^@(.*)/[^/]*$")) or "."
end

local defaults = {
    conninfo = "",
    on_db_error = "open",
    retry_seconds = "10",
    statement_timeout_ms = "2000",
    set_account = "yes",
    exempt_users = "",
}

local function trim(s)
    return (s:gsub("^%s+", ""):gsub("%s+$", ""))
end

-- libpq's messages end with a line break (and may hold more): one log line each
local function oneline(s)
    return trim((tostring(s):gsub("%s+", " ")))
end

-- a name the user gave (sbatch -A) in a log line: its control characters as \ddd, so that a
-- line break in it cannot forge a log line of its own
local function shown(s)
    return (tostring(s):gsub("%c", function(c) return string.format("\\%03d", c:byte()) end))
end

local function read_config()
    local path = os.getenv("HPCACCT_JOB_SUBMIT_CONF") or (script_dir() .. "/hpcacct_job_submit.conf")
    local conf = {}
    for k, v in pairs(defaults) do conf[k] = v end
    local f = io.open(path, "r")
    if not f then
        slurm.log_error("%s: no configuration file %s: every job is %s", NAME, path,
                        conf.on_db_error == "closed" and "refused" or "accepted unchecked")
        return conf, path
    end
    local n = 0
    for line in f:lines() do
        n = n + 1
        line = line:gsub("#.*$", "")
        if line:match("%S") then
            local key, value = line:match("^%s*([%w_]+)%s*=%s*(.-)%s*$")
            if not key or defaults[key] == nil then
                slurm.log_error("%s: %s line %d not understood: %s", NAME, path, n, line)
            else
                conf[key] = value
            end
        end
    end
    f:close()
    if conf.on_db_error ~= "open" and conf.on_db_error ~= "closed" then
        slurm.log_error("%s: on_db_error must be open or closed, not '%s': using closed", NAME, conf.on_db_error)
        conf.on_db_error = "closed"
    end
    conf.exempt = {}
    for u in conf.exempt_users:gmatch("[^,%s]+") do conf.exempt[u] = true end
    conf.retry = tonumber(conf.retry_seconds) or 10
    return conf, path
end

local conf, conf_path = read_config()

-- ---- the connection ---------------------------------------------------------------------

local ok_luasql, luasql = pcall(require, "luasql.postgres")
if not ok_luasql then
    slurm.log_error("%s: cannot load luasql.postgres (Debian: apt-get install lua-sql-postgres): %s",
                    NAME, tostring(luasql))
    luasql = nil
end

local env = luasql and luasql.postgres() or nil
local con = nil
local next_attempt = 0   -- os.time() before which no new connection is tried

local function disconnect()
    if con then pcall(function() con:close() end) end
    con = nil
end

local function connect()
    if con then return true end
    if not env then return false, "luasql.postgres is not available" end
    if conf.conninfo == "" then return false, "no conninfo in " .. conf_path end
    if os.time() < next_attempt then return false, "database unreachable, next attempt in "
                                                    .. (next_attempt - os.time()) .. " s" end
    -- statement_timeout and application_name travel with the connection request (no round
    -- trips of their own); the check is prepared once per connection, so that each submission
    -- is one EXECUTE that the server neither parses nor plans again. connect_timeout=2 comes
    -- first: a conninfo that sets none would let slurmctld wait for as long as a server that
    -- took the connection does not answer it (a later keyword wins: conninfo's own stays).
    -- So does client_encoding=UTF8: a login whose default is LATIN1 would read an account
    -- named in UTF-8 as another name.
    local timeout = tonumber(conf.statement_timeout_ms) or 2000
    local c, err = env:connect(string.format(
        "connect_timeout=2 client_encoding=UTF8 %s options='-c statement_timeout=%d' "
        .. "application_name='slurm job_submit/lua (hpcacct)'",
        conf.conninfo, timeout))
    if not c then
        next_attempt = os.time() + conf.retry
        return false, "cannot connect: " .. oneline(err)
    end
    local prepared, perr = c:execute("PREPARE hpcacct_check_submit(text, text) AS "
                                     .. "SELECT ok, account, reason, message FROM hpcacct.check_submit($1, $2)")
    if not prepared then
        pcall(function() c:close() end)
        next_attempt = os.time() + conf.retry
        return false, "cannot prepare the check: " .. oneline(perr)
    end
    con = c
    slurm.log_info("%s: connected to the accounting database", NAME)
    return true
end

local function quote(value)
    if value == nil then return "NULL" end
    return "'" .. con:escape(value) .. "'"
end

-- check_submit(user, account): returns a decision table {ok, account, reason, message}, or
-- nil and an error when the database could not answer (after one reconnection).
local function check(user, account)
    for attempt = 1, 2 do
        local connected, err = connect()
        if not connected then return nil, err end
        local sql = string.format("EXECUTE hpcacct_check_submit(%s, %s)", quote(user), quote(account))
        local cur, qerr = con:execute(sql)
        if cur then
            local row = cur:fetch({}, "a")
            cur:close()
            if row then
                return { ok = (row.ok == "t" or row.ok == true), account = row.account,
                         reason = row.reason, message = row.message }
            end
            qerr = "check_submit returned no row"
        end
        -- a broken connection or a restarted server: start afresh once; a check that ran out
        -- of time would only run out of time again
        disconnect()
        if attempt == 2 or tostring(qerr):find("statement timeout", 1, true) then return nil, oneline(qerr) end
        slurm.log_info("%s: query failed (%s), reconnecting", NAME, oneline(qerr))
    end
end

-- ---- decisions --------------------------------------------------------------------------

local error_of_reason = {
    unknown_account = "ESLURM_INVALID_ACCOUNT",
    no_default_project = "ESLURM_INVALID_ACCOUNT",
    account_deleted = "ESLURM_INVALID_ACCOUNT",
    unknown_user = "ESLURM_ACCESS_DENIED",
    no_access = "ESLURM_ACCESS_DENIED",
}

local function refuse(reason, message)
    slurm.log_user("%s", message)
    local code = slurm[error_of_reason[reason] or "ESLURM_ACCOUNTING_POLICY"]
    return code or slurm.ERROR
end

local function name_of_uid(uid)
    local p = io.popen("getent passwd " .. tonumber(uid))
    local line = p and p:read("*l") or nil
    if p then p:close() end
    return line and line:match("^([^:]+)") or tostring(uid)
end

-- slurmctld fills job_desc.user_name (22.05); the lookup is a fallback
local function user_name(job_desc, uid)
    if job_desc.user_name and job_desc.user_name ~= "" then return job_desc.user_name end
    return name_of_uid(uid)
end

-- Decides for `user` submitting to `account` (nil: hpcacct's default project).
local function decide(what, user, account, job_desc)
    if conf.exempt[user] then return slurm.SUCCESS end
    local d, err = check(user, account)
    if not d then
        if conf.on_db_error == "closed" then
            slurm.log_error("%s: %s refused for %s: accounting database unavailable (%s)", NAME, what, shown(user), err)
            slurm.log_user("%s", "the accounting database cannot be reached or did not answer, so no job can be checked: "
                                 .. "submissions are refused until it is back (try again later)")
            return slurm.ERROR
        end
        slurm.log_error("%s: %s accepted unchecked for %s (account %s): accounting database unavailable (%s)",
                        NAME, what, shown(user), shown(account), err)
        return slurm.SUCCESS
    end
    if not d.ok then
        slurm.log_info("%s: %s refused for %s on %s: %s", NAME, what, shown(user), shown(d.account), tostring(d.reason))
        return refuse(d.reason, d.message)
    end
    if account == nil and d.account and conf.set_account == "yes" and job_desc then
        job_desc.account = d.account
    end
    return slurm.SUCCESS
end

-- Slurm's account names are lower case (sacctmgr stores them so): sbatch -A PROJ1 runs on proj1
local function slurm_account(account)
    if account == nil then return nil end
    return string.lower(account)
end

function slurm_job_submit(job_desc, part_list, submit_uid)
    local account = slurm_account(job_desc.account)
    -- set_account = no: a job without -A runs on the user's default account in Slurm (which
    -- slurmctld hands the script), not on hpcacct's default project: that is the one to check
    if account == nil and conf.set_account ~= "yes" and job_desc.default_account
       and job_desc.default_account ~= "" then
        account = slurm_account(job_desc.default_account)
    end
    return decide("submission", user_name(job_desc, job_desc.user_id or submit_uid), account, job_desc)
end

-- Who may write a comment starting "hpcacct: ": root and SlurmUser (slurmctld's own uid), as
-- hpcacct-slurm-sync runs. Such a comment marks hpcacct's hold; an owner who wrote it back after
-- an operator replaced it would have the sync lift the operator's hold.
local function own_uid()
    local f = io.open("/proc/self/status", "r")
    if not f then return 0 end
    local text = f:read("*a") or ""
    f:close()
    return tonumber(text:match("\nUid:%s*(%d+)")) or 0
end
local ctld_uid = own_uid()

-- A pending job's account changed (scontrol update jobid=N account=X): the new one must be valid.
-- A comment starting "hpcacct: " is hpcacct's own (see own_uid): refused from anyone else.
function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
    if type(job_desc.comment) == "string" and job_desc.comment:sub(1, 9) == "hpcacct: "
       and modify_uid ~= 0 and modify_uid ~= ctld_uid then
        slurm.log_info("%s: comment change refused for uid %s: \"hpcacct: \" is hpcacct-slurm-sync's", NAME,
                       tostring(modify_uid))
        return refuse("no_access", "a comment starting \"hpcacct: \" is written by hpcacct-slurm-sync only")
    end
    if job_desc.account == nil or job_rec == nil then return slurm.SUCCESS end
    local user = name_of_uid(job_rec.user_id or modify_uid)
    return decide("account change", user, slurm_account(job_desc.account), nil)
end

slurm.log_info("%s: job_submit/lua loaded (configuration %s, on_db_error=%s)", NAME, conf_path, conf.on_db_error)
return slurm.SUCCESS
