-- The metrics the limiters count in a lua_shared_dict (the `metrics` option), served in
-- Prometheus' text format, the same names as the Python and Node packages':
--
--   ratelimit_decisions_total{policy, outcome}      decisions, by policy and outcome:
--       allowed, delayed, refused, deny_cache, failed_open, failed_closed, shadow
--   ratelimit_server_call_duration_seconds          the server call's latency (histogram)
--   ratelimit_load_level{service}                   a service's load level, from its reports
--   ratelimit_load_decisions_total{service, priority, outcome}   the load shedder's
--       decisions (resty.ratelimit_module.load): admitted, shed, shadow
--
--   location = /metrics { content_by_lua_block {
--       require("resty.ratelimit_module.metrics").serve("ratelimit_metrics") } }
--
-- A client records into its dict (`count`, `observe`); `text` and `serve` read it.
local ngx = ngx
local concat, sort, format = table.concat, table.sort, string.format
local find, sub, tostring = string.find, string.sub, tostring
local floor, ipairs = math.floor, ipairs

local _M = { _VERSION = "0.3.0" }

-- Latency buckets of the server call, in seconds (Prometheus' `le`).
_M.BUCKETS = { 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1 }

--- Counts a server call of `client` that took `seconds` in the latency histogram.
function _M.observe(client, seconds)
    local metrics = client.metrics
    if not metrics then
        return
    end
    for _, le in ipairs(_M.BUCKETS) do
        if seconds <= le then
            metrics:incr("latency_bucket|" .. le, 1, 0)
        end
    end
    metrics:incr("latency_bucket|+Inf", 1, 0)
    metrics:incr("latency_count", 1, 0)
    metrics:incr("latency_sum_us", floor(seconds * 1e6 + 0.5), 0)
end

--- Counts one decision of `client`'s `policy` with `outcome` (allowed, refused, delayed,
--- failed_open, failed_closed, deny_cache, shadow).
function _M.count(client, policy, outcome)
    local metrics = client.metrics
    if metrics then
        metrics:incr("decisions|" .. policy .. "|" .. outcome, 1, 0)
    end
end

-- A label value, escaped as the text format wants.
local function label(value)
    return (value:gsub("\\", "\\\\"):gsub("\n", "\\n"):gsub('"', '\\"'))
end

--- The metrics in `dict` (a shared dict's name) as Prometheus text.
function _M.text(name)
    local dict = ngx.shared[name]
    if not dict then
        return nil, "shared dict not found"
    end
    local lines = {
        "# HELP ratelimit_decisions_total Rate-limiting decisions, by policy and outcome.",
        "# TYPE ratelimit_decisions_total counter",
    }
    local decisions = {}
    for _, key in ipairs(dict:get_keys(0)) do
        if sub(key, 1, 10) == "decisions|" then
            decisions[#decisions + 1] = key
        end
    end
    sort(decisions)
    for _, key in ipairs(decisions) do
        local bar = find(key, "|", 11, true)
        local policy, outcome = sub(key, 11, bar - 1), sub(key, bar + 1)
        lines[#lines + 1] = format('ratelimit_decisions_total{policy="%s",outcome="%s"} %d',
            label(policy), label(outcome), dict:get(key) or 0)
    end
    local levels, shedding = {}, {}
    for _, key in ipairs(dict:get_keys(0)) do
        if sub(key, 1, 11) == "load_level|" then
            levels[#levels + 1] = key
        elseif sub(key, 1, 15) == "load_decisions|" then
            shedding[#shedding + 1] = key
        end
    end
    sort(levels)
    sort(shedding)
    if #levels > 0 then
        lines[#lines + 1] = "# HELP ratelimit_load_level A service's load level, as its last "
            .. "report answered."
        lines[#lines + 1] = "# TYPE ratelimit_load_level gauge"
        for _, key in ipairs(levels) do
            lines[#lines + 1] = format('ratelimit_load_level{service="%s"} %d',
                label(sub(key, 12)), dict:get(key) or 0)
        end
    end
    if #shedding > 0 then
        lines[#lines + 1] = "# HELP ratelimit_load_decisions_total The load shedder's decisions, "
            .. "by service, priority and outcome."
        lines[#lines + 1] = "# TYPE ratelimit_load_decisions_total counter"
        for _, key in ipairs(shedding) do
            -- load_decisions|<service>|<priority>|<outcome>: the service may hold bars.
            local outcome_bar = find(key, "|[^|]*$")
            local priority_bar = find(sub(key, 1, outcome_bar - 1), "|[^|]*$")
            lines[#lines + 1] = format(
                'ratelimit_load_decisions_total{service="%s",priority="%s",outcome="%s"} %d',
                label(sub(key, 16, priority_bar - 1)),
                label(sub(key, priority_bar + 1, outcome_bar - 1)),
                label(sub(key, outcome_bar + 1)), dict:get(key) or 0)
        end
    end
    lines[#lines + 1] = "# HELP ratelimit_server_call_duration_seconds The latency of a call to "
        .. "the server."
    lines[#lines + 1] = "# TYPE ratelimit_server_call_duration_seconds histogram"
    for _, le in ipairs(_M.BUCKETS) do
        lines[#lines + 1] = format('ratelimit_server_call_duration_seconds_bucket{le="%s"} %d',
            tostring(le), dict:get("latency_bucket|" .. le) or 0)
    end
    lines[#lines + 1] = format('ratelimit_server_call_duration_seconds_bucket{le="+Inf"} %d',
        dict:get("latency_bucket|+Inf") or 0)
    lines[#lines + 1] = format("ratelimit_server_call_duration_seconds_sum %.6f",
        (dict:get("latency_sum_us") or 0) / 1e6)
    lines[#lines + 1] = format("ratelimit_server_call_duration_seconds_count %d",
        dict:get("latency_count") or 0)
    return concat(lines, "\n") .. "\n"
end

--- Answers the request with the metrics in `name` (a shared dict's name).
function _M.serve(name)
    local text, err = _M.text(name)
    if not text then
        ngx.status = 500
        ngx.say(err)
        return
    end
    ngx.header["Content-Type"] = "text/plain; version=0.0.4"
    ngx.print(text)
end

return _M
