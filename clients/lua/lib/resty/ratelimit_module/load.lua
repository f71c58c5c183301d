-- Load shedding at the gateway (docs/load.md), two checks on every request, neither a server
-- call:
-- - each worker's own limit on requests in flight to the upstream
--   (resty.ratelimit_module.concurrency): it follows the upstream's response time, cuts when a
--   standing queue forms and, while congested, keeps its top places for the more important
--   classes; it needs no server at all;
-- - the fleet's level: nginx reports its upstreams' health under a service's key once an
--   interval (the requests in flight, the upstream response time, the share of 5xx, and the
--   counts `bbr` and `admission` read), and learns in the same call the service's level and
--   the share of each priority class it admits. The signals, the level and the shares live
--   in a lua_shared_dict: every worker of one nginx counts and reads them, one report goes
--   out per interval, and a HUP reload keeps them.
-- A request goes on only when both admit it.
--
--   lua_shared_dict ratelimit_load 1m;
--   init_worker_by_lua_block {
--       require("resty.ratelimit_module.load").start({ host = "127.0.0.1" },
--           { service = "load:gateway", dict = "ratelimit_load" })
--   }
--   access_by_lua_block { require("resty.ratelimit_module.load").shed(ngx.var.http_x_priority) }
--   log_by_lua_block { require("resty.ratelimit_module.load").record() }
--
-- Options of `start` (the second table; the first is the Redis options of the client):
--
--   service    the service's key (required)
--   dict       the lua_shared_dict's name (required)
--   instance   this nginx's name among the service's instances ("<hostname>:nginx")
--   interval   seconds between reports (1)
--   ttl        seconds a report counts (3 intervals)
--   window     seconds over which max_rps, min_rt, requests and successes are counted (10)
--   shadow     true: nothing is shed; what would be is counted and logged
--   metrics    a lua_shared_dict's name: the level and the decisions, which
--              resty.ratelimit_module.metrics serves
--   factors    a function answering a table of the gateway's own factors (name -> number)
--              to add to each report; a policy declares them (FACTOR name MAX|MEAN|SUM)
--   limit      each worker's own limit on requests in flight: true (the default), a table
--              of options over resty.ratelimit_module.concurrency's, or false to shed by
--              the level alone
--
-- A priority is critical_plus, critical, sheddable_plus or sheddable; a request naming none
-- of them is sheddable. A shed request gets 503 with Retry-After (one interval). When a report
-- fails, the last level holds for the report's time to live, then the level is 0 (nothing shed
-- by level); each worker's own limit goes on protecting the upstream.
local client = require "resty.ratelimit_module.client"
local concurrency = require "resty.ratelimit_module.concurrency"
local protocol = require "resty.ratelimit_module.protocol"

local ngx = ngx
local floor, min, max, random = math.floor, math.min, math.max, math.random
local lower, concat = string.lower, table.concat
local tonumber, tostring, type = tonumber, tostring, type

local _M = { _VERSION = "0.3.0" }

_M.PRIORITIES = { "critical_plus", "critical", "sheddable_plus", "sheddable" }
local INDEX = { critical_plus = 1, critical = 2, sheddable_plus = 3, sheddable = 4 }

-- This worker's configuration, set by `start`, and its own limit (nil when off).
local config
local limit

-- Whole microseconds, as the limit counts time.
local function micros(seconds)
    return floor(seconds * 1000000 + 0.5)
end

--- The class of `name`: one the service knows, or "sheddable".
function _M.priority(name)
    name = type(name) == "string" and lower(name) or ""
    return INDEX[name] and name or "sheddable"
end

--- The command of a report of `factors` (a table name -> number).
_M.report_command = protocol.report

local function set_level(dict, metrics, service, reply)
    local standing = protocol.standing(reply)
    dict:set("level", standing.level)
    for i = 1, 4 do
        dict:set("share|" .. i, standing.shares[i])
    end
    dict:set("reported_at", ngx.now())
    if metrics then
        metrics:set("load_level|" .. service, standing.level)
    end
end

--- The level and the share of the class `index`, as the last report that answered said;
--- level 0, everything admitted, once that report's time to live has passed.
local function standing(index)
    local dict = config.dict
    local at = dict:get("reported_at")
    if not at or ngx.now() - at > config.ttl then
        return 0, 1
    end
    return dict:get("level") or 0, dict:get("share|" .. index) or 1
end

-- The host's run queue over its cores (load1 / cores, Sentinel's system load), or nil.
local cores
local function host_load()
    local file = io.open("/proc/loadavg")
    local load1 = file and tonumber(file:read("*l"):match("^(%S+)"))
    if file then
        file:close()
    end
    if not cores then
        cores = 0
        local stat = io.open("/proc/stat")
        if stat then
            for line in stat:lines() do
                if line:match("^cpu%d") then
                    cores = cores + 1
                end
            end
            stat:close()
        end
        cores = max(cores, 1)
    end
    return load1 and load1 / cores
end

-- The factors of one report, from the counts every worker keeps in the dict; the interval's
-- counts start again.
local function sample()
    local dict, window = config.dict, config.window
    local factors = { inflight = max(0, dict:get("inflight") or 0) }
    local finished = dict:get("finished") or 0
    if finished > 0 then
        factors.latency = (dict:get("latency_sum_ms") or 0) / finished
        factors.errors = (dict:get("failed") or 0) / finished
        dict:incr("finished", -finished, 0)
        dict:incr("latency_sum_ms", -(dict:get("latency_sum_ms") or 0), 0)
        dict:incr("failed", -(dict:get("failed") or 0), 0)
    end
    local now = floor(ngx.now())
    local requests, successes, most, least = 0, 0, 0, nil
    for second = now - window + 1, now do
        -- Only a busy second (a worker's limit congested in it) counts towards max_rps and
        -- min_rt: a second when nginx was not busy measured the demand, not the capacity.
        local done = dict:get("busy|" .. second) and dict:get("completed|" .. second)
        if done then
            most = max(most, done)
            local fastest = dict:get("min_rt|" .. second)
            if fastest then
                least = least and min(least, fastest) or fastest
            end
        end
        requests = requests + (dict:get("requests|" .. second) or 0)
        successes = successes + (dict:get("successes|" .. second) or 0)
    end
    if most > 0 and least then
        factors.max_rps, factors.min_rt = most, least
    end
    factors.requests, factors.successes = requests, successes
    factors.load = host_load()
    if config.factors then
        -- The gateway's own numbers: a callback that fails costs its factors, not the report.
        local ok, own = pcall(config.factors)
        local numbers = {}
        if ok and type(own) == "table" then
            for name, value in pairs(own) do
                numbers[name] = tonumber(value)
                if not numbers[name] then
                    ok, own = false, name .. " is not a number"
                    break
                end
            end
        end
        if ok and type(own) == "table" then
            for name, value in pairs(numbers) do
                factors[name] = value
            end
        else
            ngx.log(ngx.WARN, "ratelimit_module: the load factors of ", config.service,
                " failed: ", tostring(own))
        end
    end
    return factors
end

--- Reports now (what the timer does once an interval): the level and shares, or nil and the
--- error.
function _M.report()
    local c = config.client
    local command = _M.report_command(config.service, config.instance, config.ttl, sample())
    local reply, err = c:call(config.service, command)
    if not reply then
        c:log_error("the load report of " .. config.service .. " failed: " .. tostring(err))
        return nil, err
    end
    set_level(config.dict, config.metrics, config.service, reply)
    return reply
end

-- The machine's name (ngx.var is not there in init_worker).
local function hostname()
    local file = io.open("/proc/sys/kernel/hostname")
    local name = file and file:read("*l")
    if file then
        file:close()
    end
    return name or "nginx"
end

--- Starts this worker's part (from init_worker_by_lua*): the first worker reports every
--- interval, every worker sheds and counts.
function _M.start(redis, opts)
    assert(type(opts) == "table" and opts.service and opts.dict,
        "load.start needs service and dict")
    local c = assert(client.get(redis))
    local dict = assert(ngx.shared[opts.dict], "load: shared dict not found")
    local metrics = opts.metrics
        and assert(ngx.shared[opts.metrics], "metrics: shared dict not found")
    local interval = opts.interval or 1
    config = {
        client = c,
        service = opts.service,
        dict = dict,
        metrics = metrics,
        instance = opts.instance or (hostname() .. ":nginx"),
        interval = interval,
        ttl = opts.ttl or 3 * interval,
        window = opts.window or 10,
        shadow = opts.shadow and true or false,
        factors = opts.factors,
    }
    if opts.limit == false then
        limit = nil
    else
        limit = concurrency.new(type(opts.limit) == "table" and opts.limit or nil)
    end
    _M.limit = limit
    if ngx.worker.id() == 0 then
        local ok, err = ngx.timer.every(interval, function(premature)
            if not premature then
                _M.report()
            end
        end)
        if not ok then
            ngx.log(ngx.ERR, "ratelimit_module: the load reports could not start: ", err)
        end
        ngx.timer.at(0, function(premature)
            if not premature then
                _M.report()
            end
        end)
    end
    return true
end

--- Whether a request of `priority` goes on: when both the level (the share it gives the
--- class, at random) and this worker's limit admit it; in shadow mode always, counting what
--- would be shed. Then the level, and whether the worker's limit counts it in flight.
function _M.admit(priority)
    local name = _M.priority(priority)
    local level, share = standing(INDEX[name])
    local by_level = random() < share
    local counted = by_level and limit ~= nil and limit:admit(INDEX[name], micros(ngx.now()))
    local admitted = by_level and (counted or limit == nil)
    local outcome = admitted and "admitted"
        or (config.shadow and "shadow" or (by_level and "shed_local" or "shed"))
    local metrics = config.metrics
    if metrics then
        metrics:incr(concat({ "load_decisions", config.service, name, outcome }, "|"), 1, 0)
    end
    if outcome == "shadow" then
        ngx.log(ngx.WARN, "ratelimit_module: shadow: ", name, " would be shed ",
            by_level and "by the worker's limit" or ("at level " .. level), " of ", config.service)
    end
    return admitted or config.shadow, level, counted
end

--- Sheds the request (from access_by_lua*) when the level or this worker's limit does not
--- admit it: 503 with Retry-After; otherwise counts it in flight, for `record`.
function _M.shed(priority)
    local admitted, _, counted = _M.admit(priority)
    if not admitted then
        -- Not the service's: `record` counts nothing of it (a shed request counted as a
        -- failed one would raise the level that shed it, and keep it up).
        ngx.ctx.ratelimit_load = "shed"
        ngx.header["Retry-After"] = tostring(max(1, math.ceil(config.interval)))
        return ngx.exit(503)
    end
    config.dict:incr("inflight", 1, 0)
    ngx.ctx.ratelimit_load = counted and "counted" or true
end

--- Counts the request that ends (from log_by_lua*): its upstream's response time (or the
--- request's) and status; nothing of a request `shed` shed, and nothing but its place in flight
--- of a 429 or of the package's own answer (a refusal, the failure policy's 503 or 500).
function _M.record()
    local dict = config.dict
    local counted = ngx.ctx.ratelimit_load
    if counted == "shed" then
        return
    end
    if counted then
        dict:incr("inflight", -1, 0)
    end
    -- The last upstream tried: "0.012, 0.020" lists every attempt.
    local times = ngx.var.upstream_response_time or ""
    local seconds = tonumber(times:match("([%d%.]+)%s*$")) or tonumber(ngx.var.request_time) or 0
    local status = tonumber(ngx.var.status) or 0
    local millis = seconds * 1000
    if counted == "counted" and limit then
        limit:finish(micros(seconds), micros(ngx.now()))
    end
    if status == 429 or (status >= 500 and ngx.ctx.ratelimit_own) then
        -- A limit's refusal, or the failure policy's answer (circuit.mark_own): nothing of
        -- the upstream's health.
        return
    end
    dict:incr("finished", 1, 0)
    dict:incr("latency_sum_ms", millis, 0)
    local now = floor(ngx.now())
    local keep = config.window + 2
    if limit and limit.congested then
        dict:set("busy|" .. now, true, keep)
    end
    dict:incr("completed|" .. now, 1, 0, keep)
    dict:incr("requests|" .. now, 1, 0, keep)
    if status >= 500 then
        dict:incr("failed", 1, 0)
    else
        dict:incr("successes|" .. now, 1, 0, keep)
    end
    local fastest = dict:get("min_rt|" .. now)
    if not fastest or millis < fastest then
        dict:set("min_rt|" .. now, millis, keep)
    end
end

return _M
