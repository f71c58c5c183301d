-- The upstream's health as load shedding at the gateway reports it (resty.ratelimit_module
-- .load): what each request that ends adds to the counts every worker keeps in the shared
-- dict (its log phase), and once an interval the factors of a report read from them (its
-- timer), with the host's own load and the gateway's factors.
local ngx = ngx
local floor, min, max = math.floor, math.min, math.max
local pairs, pcall, tonumber, tostring, type = pairs, pcall, tonumber, tostring, type

local _M = { _VERSION = "0.3.0" }

-- The routes a second keeps apart for min_rt; past them, the others share slot 0.
local ROUTES_KEPT = 32
_M.ROUTES_KEPT = ROUTES_KEPT

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

--- The factors of one report for `config` (load.lua's: its dict, window, service and own
--- `factors`), from the counts every worker keeps in the dict; the interval's counts start
--- again.
function _M.sample(config)
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
    local requests, successes, most = 0, 0, 0
    -- Each route's completed requests and least latency over the busy seconds.
    local routes = {}
    for second = now - window + 1, now do
        -- Only a busy second (a worker's limit congested in it) counts towards max_rps and
        -- min_rt: a second when nginx was not busy measured the demand, not the capacity.
        local done = dict:get("busy|" .. second) and dict:get("completed|" .. second)
        if done then
            most = max(most, done)
            local slots = min(dict:get("routes|" .. second) or 0, ROUTES_KEPT)
            for slot = 0, slots do
                local at = second .. "|" .. slot
                local completed = dict:get("route_completed|" .. at)
                local fastest = dict:get("route_min_rt|" .. at)
                local route = slot == 0 and "" or dict:get("route_name|" .. at)
                if completed and fastest and route then
                    local total = routes[route]
                    if total then
                        total[1], total[2] = total[1] + completed, min(total[2], fastest)
                    else
                        routes[route] = { completed, fastest }
                    end
                end
            end
        end
        requests = requests + (dict:get("requests|" .. second) or 0)
        successes = successes + (dict:get("successes|" .. second) or 0)
    end
    -- BBR's min RTT for a pipe whose requests differ: each route's least latency (its
    -- no-load latency) weighted by how many requests it completed. With one route, its least
    -- latency; with a fast health check beside slow work, the work's, not the check's (the
    -- least latency of all would shrink the pipe to what the check holds, and read an
    -- upstream at its capacity as many times over it).
    local weighted, completed = 0, 0
    for _, total in pairs(routes) do
        weighted, completed = weighted + total[1] * total[2], completed + total[1]
    end
    if most > 0 and completed > 0 then
        factors.max_rps, factors.min_rt = most, weighted / completed
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

-- The slot of `route` in `second` (1 to ROUTES_KEPT, 0 past them and for none named): the
-- first worker to see a route in a second takes the next slot and names it; a slot taken by
-- two workers at once is left unnamed, and counts nothing.
local function route_slot(dict, second, route, keep)
    if not route then
        return 0
    end
    local named = "route|" .. second .. "|" .. route
    local slot = dict:get(named)
    if slot then
        return slot
    end
    local taken = dict:incr("routes|" .. second, 1, 0, keep)
    if not taken or taken > ROUTES_KEPT then
        return 0
    end
    if dict:add(named, taken, keep) then
        dict:set("route_name|" .. second .. "|" .. taken, route, keep)
        return taken
    end
    return dict:get(named) or 0
end

--- Counts a request that ended in `dict`, for a report over `window` seconds: its
--- upstream's response time in ms and its status, whether this worker's limit was
--- congested (`busy`: only a busy second counts towards max_rps and min_rt), and its
--- `route` (method and path), whose least latency is kept apart (min_rt).
function _M.count(dict, window, millis, status, busy, route)
    dict:incr("finished", 1, 0)
    dict:incr("latency_sum_ms", millis, 0)
    local now = floor(ngx.now())
    local keep = window + 2
    if busy then
        dict:set("busy|" .. now, true, keep)
    end
    dict:incr("completed|" .. now, 1, 0, keep)
    dict:incr("requests|" .. now, 1, 0, keep)
    if status >= 500 then
        dict:incr("failed", 1, 0)
    else
        dict:incr("successes|" .. now, 1, 0, keep)
    end
    local at = now .. "|" .. route_slot(dict, now, route, keep)
    dict:incr("route_completed|" .. at, 1, 0, keep)
    local fastest = dict:get("route_min_rt|" .. at)
    if not fastest or millis < fastest then
        dict:set("route_min_rt|" .. at, millis, keep)
    end
end

return _M
