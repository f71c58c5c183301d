-- Any call, built from limiter specs and options as the Python, Node and Rust packages build
-- it, and its reply read into the result they read: for a caller of `client:call` that wants
-- what this package's limiters do not offer (RL.LOG, DELAY, FORCE, a load gate in RL.ALL),
-- and for clients/conformance.json's parts that every package reads (`commands`, `replies`,
-- `changed_limits`, the leases', counts' and RL.TOP's). Replies are read by protocol.lua
-- (`result`, `lease_result`, `counts`, `top_keys`), as the limiters' are.
--
--   local words = specs.command({ { kind = "log", key = "login:7", limit = 3, window = 60 } },
--       { delay = 2.5 })
--   local result = specs.result(assert(c:call("login:7", words)), limiters, options)
local protocol = require "resty.ratelimit_module.protocol"

local floor, max = math.floor, math.max
local ipairs = ipairs

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

local NO_OPTIONS = {}

--- The result of `command(limiters, options)`'s reply (protocol.lua's `result`, told which
--- limiters are load gates and whether one takes a slot).
function _M.result(reply, limiters, options)
    options = options or NO_OPTIONS
    local gates, slots = {}, false
    for i = 1, #limiters do
        local kind = KINDS[limiters[i].kind]
        gates[i], slots = kind.gate == true, slots or kind.slots == true
    end
    return protocol.result(reply, options, gates, slots)
end

--- `RL.ACQUIRE key limit lease quantity unit` (`RL.ACQUIRE_RO` with `read_only`), the
--- lease in seconds.
function _M.lease_command(key, limit, lease, quantity, read_only, unit)
    unit = unit or "MS"
    return { read_only and "RL.ACQUIRE_RO" or "RL.ACQUIRE", key, limit, span(lease, unit),
        quantity, unit }
end

--- `RL.ACQUIRE`'s reply: the five integers and the lease's `id` (0 when refused).
_M.lease_result = protocol.lease_result

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

--- `counts_command(spec)`'s reply (protocol.lua's `counts`).
function _M.counts_result(spec, reply, unit)
    return protocol.counts(reply, spec.kind == "log", unit)
end

--- `RL.TOP`'s replies from every primary, merged (protocol.lua's `top_keys`).
_M.top_keys = protocol.top_keys

return _M
