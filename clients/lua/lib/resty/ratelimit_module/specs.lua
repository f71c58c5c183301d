-- Any call, built from limiter specs and options as the Python, Node and Rust packages build
-- it, and its reply read into the result they read: for a caller of `client:call` that wants
-- what this package's limiters do not offer (RL.LOG, DELAY, FORCE, a load gate in RL.ALL),
-- and for clients/conformance.json's parts that every package reads (`commands`, `replies`,
-- `changed_limits`, the leases', counts' and RL.TOP's). The five integers are read by
-- protocol.lua's `decision`, as the limiters read them.
--
--   local words = specs.command({ { kind = "log", key = "login:7", limit = 3, window = 60 } },
--       { delay = 2.5 })
--   local result = specs.result(assert(c:call("login:7", words)), limiters, options)
local protocol = require "resty.ratelimit_module.protocol"

local floor, max = math.floor, math.max
local tonumber, tostring, type, ipairs = tonumber, tostring, type, ipairs
local sort = table.sort

local _M = { _VERSION = "0.3.0" }

local PER_SECOND = protocol.PER_SECOND

-- Seconds in `unit`, whole, at least 1 (a period, a window, a lease).
local function span(seconds, unit)
    return max(1, floor(seconds * PER_SECOND[unit] + 0.5))
end

-- Each kind of limiter: its command alone, its word in RL.ALL, its arguments and keywords,
-- and the window of its HTTP policy (seconds).
local KINDS = {
    throttle = {
        command = "CL.THROTTLE", in_all = "THROTTLE",
        arguments = function(spec, unit)
            return { spec.max_burst, spec.count, span(spec.period, unit) }
        end,
        keywords = function(spec, unit)
            return spec.warmup and { "WARMUP", span(spec.warmup, unit) } or {}
        end,
        window = function(spec)
            return (spec.max_burst + 1) * spec.period / spec.count
        end,
    },
    window = {
        command = "RL.WINDOW", in_all = "WINDOW",
        arguments = function(spec, unit)
            return { spec.limit, span(spec.window, unit) }
        end,
        keywords = function(spec)
            local words = {}
            for word in (spec.algorithm or "SLIDING"):gmatch("%S+") do
                words[#words + 1] = word
            end
            return words
        end,
        window = function(spec)
            return spec.window
        end,
    },
    log = {
        command = "RL.LOG", in_all = "LOG",
        arguments = function(spec, unit)
            return { spec.limit, span(spec.window, unit) }
        end,
        keywords = function()
            return {}
        end,
        window = function(spec)
            return spec.window
        end,
    },
    load = {
        in_all = "LOAD", only_in_all = true, gate = true,
        arguments = function(spec)
            return { spec.priority or "sheddable" }
        end,
        keywords = function()
            return {}
        end,
    },
    lease = {
        in_all = "LEASE", only_in_all = true, slots = true,
        arguments = function(spec, unit)
            return { spec.limit, span(spec.lease, unit) }
        end,
        keywords = function()
            return {}
        end,
        window = function(spec)
            return spec.lease
        end,
    },
}

local function append(words, more)
    for _, word in ipairs(more) do
        words[#words + 1] = word
    end
end

-- The words of a call's options (docs/options.md): the quantity and unit, then BLOCK,
-- DELAY, AT_MOST, FORCE, REFUND.
local function option_words(options, unit)
    local words = { options.quantity or 1, unit }
    if options.block then
        append(words, { "BLOCK", span(options.block, unit) })
    end
    if options.delay then
        append(words, { "DELAY", max(0, floor(options.delay * PER_SECOND[unit] + 0.5)) })
    end
    if options.at_most then
        words[#words + 1] = "AT_MOST"
    end
    if options.force then
        words[#words + 1] = "FORCE"
    end
    if options.refund then
        words[#words + 1] = "REFUND"
    end
    return words
end

--- The one command a request against `limiters` takes (specs: `kind` throttle, window,
--- log, load or lease, `key`, and the kind's numbers in seconds), with `options` (quantity,
--- block, delay, at_most, force, refund, read_only; `unit` "MS", the default, or "US"): the
--- limiter's own, or `RL.ALL` with `DETAILS`.
function _M.command(limiters, options)
    options = options or {}
    local unit = options.unit or "MS"
    local suffix = options.read_only and "_RO" or ""
    local one = limiters[1]
    if #limiters == 1 and not KINDS[one.kind].only_in_all then
        local kind = KINDS[one.kind]
        local words = { kind.command .. suffix, one.key }
        append(words, kind.arguments(one, unit))
        append(words, option_words(options, unit))
        append(words, kind.keywords(one, unit))
        return words
    end
    local words = { "RL.ALL" .. suffix, #limiters }
    for _, spec in ipairs(limiters) do
        words[#words + 1] = spec.key
    end
    for _, spec in ipairs(limiters) do
        local kind = KINDS[spec.kind]
        words[#words + 1] = kind.in_all
        append(words, kind.arguments(spec, unit))
        append(words, kind.keywords(spec, unit))
    end
    append(words, option_words(options, unit))
    words[#words + 1] = "DETAILS"
    return words
end

--- The window of `spec`'s HTTP policy, in seconds.
function _M.window_seconds(spec)
    return KINDS[spec.kind].window(spec)
end

-- `decision`'s values as a table, for `result`'s `each`.
local function decision(fields, unit)
    local allowed, limit, remaining, retry_after, reset_after = protocol.decision(fields, unit)
    return { allowed = allowed, limit = limit, remaining = remaining, retry_after = retry_after,
        reset_after = reset_after, wait = 0 }
end

local NO_OPTIONS = {}

--- The result of `command(limiters, options)`'s reply: the five integers (times in
--- seconds), the sixth (a wait under `delay`, the units `granted` under `at_most`, a
--- lease's id), with a load gate the level that shed the request, and with several
--- limiters each rate limiter's own (`each`, the gate left out; empty for one limiter).
function _M.result(reply, limiters, options)
    options = options or NO_OPTIONS
    local unit = options.unit or "MS"
    local per_second = PER_SECOND[unit]
    local n = #limiters
    local gate, slots = false, false
    for i = 1, n do
        local kind = KINDS[limiters[i].kind]
        gate, slots = gate or kind.gate == true, slots or kind.slots == true
    end
    local at, sixth = 6, nil
    if options.delay or options.at_most or slots then
        sixth, at = tonumber(reply[6]), 7
    end
    local shed_level = 0
    if gate then
        shed_level, at = tonumber(reply[at]), at + 1
    end
    local each = {}
    if n > 1 then
        for i = 1, n do
            local own = reply[at + i - 1]
            if not KINDS[limiters[i].kind].gate and type(own) == "table" then
                each[#each + 1] = decision(own, unit)
            end
        end
    end
    local allowed, limit, remaining, retry_after, reset_after = protocol.decision(reply, unit)
    return {
        allowed = allowed,
        limit = limit,
        remaining = remaining,
        retry_after = retry_after,
        reset_after = reset_after,
        wait = options.delay and sixth / per_second or 0,
        granted = options.at_most and sixth or nil,
        lease_id = slots and sixth or 0,
        shed_level = shed_level,
        each = each,
    }
end

--- `RL.ACQUIRE key limit lease quantity unit` (`RL.ACQUIRE_RO` with `read_only`), the
--- lease in seconds.
function _M.lease_command(key, limit, lease, quantity, read_only, unit)
    unit = unit or "MS"
    return { read_only and "RL.ACQUIRE_RO" or "RL.ACQUIRE", key, limit, span(lease, unit),
        quantity, unit }
end

--- `RL.ACQUIRE`'s reply: the five integers and the lease's `id` (0 when refused).
function _M.lease_result(reply, unit)
    local lease = decision(reply, unit or "MS")
    lease.id = protocol.sixth(reply)
    return lease
end
--- `RL.WINDOW.COUNTS` (a FIXED, SLIDING or ANCHORED window) or `RL.LOG.COUNTS` (a log),
--- in `unit` ("MS" by default).
function _M.counts_command(spec, unit)
    unit = unit or "MS"
    if spec.kind == "log" then
        return { "RL.LOG.COUNTS", spec.key, span(spec.window, unit), unit }
    end
    return { "RL.WINDOW.COUNTS", spec.key, span(spec.window, unit),
        spec.algorithm or "SLIDING", unit }
end

--- `counts_command(spec)`'s reply, times in seconds: a log's count and when its oldest and
--- newest entries leave the window; a window's previous and current counts and when each
--- ends.
function _M.counts_result(spec, reply, unit)
    local per_second = PER_SECOND[unit or "MS"]
    if spec.kind == "log" then
        return { count = tonumber(reply[1]), oldest_ends_in = tonumber(reply[2]) / per_second,
            newest_ends_in = tonumber(reply[3]) / per_second }
    end
    return { previous = tonumber(reply[1]), previous_ends_in = tonumber(reply[2]) / per_second,
        current = tonumber(reply[3]), current_ends_in = tonumber(reply[4]) / per_second }
end

--- `RL.TOP`'s replies from every primary, merged (a key lives on one primary, so its rows
--- are summed only while a slot moves): at most `count` rows `{ key, refusals, error }`,
--- the most refused first, ties by key.
function _M.top_keys(replies, count)
    local merged, rows = {}, {}
    for _, reply in ipairs(replies) do
        for _, row in ipairs(reply) do
            local key = tostring(row[1])
            local sum = merged[key]
            if not sum then
                sum = { key, 0, 0 }
                merged[key] = sum
                rows[#rows + 1] = sum
            end
            sum[2] = sum[2] + tonumber(row[2])
            sum[3] = sum[3] + tonumber(row[3])
        end
    end
    sort(rows, function(a, b)
        if a[2] ~= b[2] then
            return a[2] > b[2]
        end
        return a[1] < b[1]
    end)
    for i = #rows, count + 1, -1 do
        rows[i] = nil
    end
    return rows
end

return _M
