-- The upstream's health as load shedding at the gateway reports it (resty.ratelimit_module
-- .load): what each request that ends adds to the counts every worker keeps in the shared
-- dict (its log phase), and once an interval the factors of a report read from them (its
-- timer), with the host's own load and the gateway's factors.
local ngx = ngx
local floor, min, max = math.floor, math.min, math.max
local pairs, pcall, tonumber, tostring, type = pairs, pcall, tonumber, tostring, type

local _M = { _VERSION = "0.3.0" }

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

--- Counts a request that ended in `dict`, for a report over `window` seconds: its
--- upstream's response time in ms and its status, and whether this worker's limit was
--- congested (`busy`: only a busy second counts towards max_rps and min_rt).
function _M.count(dict, window, millis, status, busy)
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
    local fastest = dict:get("min_rt|" .. now)
    if not fastest or millis < fastest then
        dict:set("min_rt|" .. now, millis, keep)
    end
end

return _M
