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
local circuit = require "resty.ratelimit_module.circuit"
local client = require "resty.ratelimit_module.client"
local concurrency = require "resty.ratelimit_module.concurrency"
local protocol = require "resty.ratelimit_module.protocol"
local signals = require "resty.ratelimit_module.signals"

local ngx = ngx
local floor, max, random = math.floor, math.max, math.random
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

--- Reports now (what the timer does once an interval): the level and shares, or nil and the
--- error.
function _M.report()
    local c = config.client
    local command = _M.report_command(config.service, config.instance, config.ttl,
        signals.sample(config))
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
--- The request begins (`begins`) or ends a wait on the rate-limit server (circuit.waiting): one
--- this worker's limit counts leaves its requests in flight meanwhile (a frozen server's
--- timeout is not the upstream's concurrency; counted, a worker whose requests wait on it
--- refuses its other locations). The first wait to begin leaves, the last to end comes back.
local function waiting(begins)
    local ctx = ngx.ctx
    if ctx.ratelimit_load ~= "counted" then
        return
    end
    local going = (ctx.ratelimit_waits or 0) + (begins and 1 or -1)
    ctx.ratelimit_waits = going
    if begins and going == 1 then
        limit:leave(micros(ngx.now()))
    elseif not begins and going == 0 then
        limit:back(micros(ngx.now()))
    end
end

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
    circuit.waiting = limit and waiting or nil
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
    -- What the level refused is shedding too: the limit counts it among its interval's refusals.
    if not by_level and limit ~= nil then
        limit:shed_by_level(micros(ngx.now()))
    end
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
--- of a 429 or of the package's own answer (a refusal, the failure policy's 503 or 500), whose
--- latency the worker's limit does not count either.
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
    local own = ngx.ctx.ratelimit_own
    -- Each route's latency is kept apart (the limit's, min_rt): a location has no pattern,
    -- so its path.
    local route = ngx.var.request_method .. " " .. ngx.var.uri
    if counted == "counted" and limit then
        if (ngx.ctx.ratelimit_waits or 0) > 0 then
            -- It ended while waiting on the server: in flight again, to leave as it ends.
            limit:back(micros(ngx.now()))
        end
        if own then
            -- The package's own answer: the time was the server's (a failed call's timeout),
            -- or none, not the upstream's.
            limit:leave(micros(ngx.now()))
        else
            limit:finish(micros(seconds), micros(ngx.now()), route)
        end
    end
    if status == 429 or (status >= 500 and own) then
        -- A limit's refusal, or the failure policy's answer (circuit.mark_own): nothing of
        -- the upstream's health.
        return
    end
    signals.count(dict, config.window, millis, status, limit and limit.congested, route)
end

return _M
