-- What the package sends and reads, in one place: the words of every command its limiters,
-- leases, lists and load reports make (names in lower case, as the client sends them; the
-- limiters' times in microseconds, "US", a lease's renewal in milliseconds), and their
-- replies read: `decision`, the five integers every limiting command answers first, which
-- each limiter maps to its own API (a delay, an excess, the connections held); `sixth`, a
-- lease's id or a quantity granted; `details`, where each limiter's answer sits in RL.ALL's;
-- `result`, `lease_result`, `counts` and `top_keys`, whole replies as every package reads
-- them (specs.lua builds those calls); `standing`, a load report's level and shares.
-- clients/conformance.json's `lua` part and the parts the package writes pin them; any other
-- call, built from limiter specs as the other packages build it, is specs.lua's.
local format, find, sub = string.format, string.find, string.sub
local rawget, setmetatable = rawget, setmetatable
local floor, max, min = math.floor, math.max, math.min
local tonumber, tostring, pairs, ipairs, type = tonumber, tostring, pairs, ipairs, type
local sort = table.sort

local _M = { _VERSION = "0.3.0" }

--- `CL.THROTTLE key burst count period_us quantity US [option...]` (`_RO` unless `commit`).
function _M.throttle(key, burst, count, period_us, quantity, commit, option, value)
    return {
        commit and "cl.throttle" or "cl.throttle_ro", key, burst, count, period_us, quantity, "US",
        option, value,
    }
end

--- `RL.WINDOW key limit window_us quantity ANCHORED US [option [value]]` (`_RO` unless
--- `commit`).
function _M.window(key, limit, window_us, quantity, commit, option, value)
    return {
        commit and "rl.window" or "rl.window_ro", key, limit, window_us, quantity, "ANCHORED",
        "US", option, value,
    }
end

--- `RL.ACQUIRE key limit lease_us 1 US` (`RL.ACQUIRE_RO` unless `commit`).
function _M.acquire(key, limit, lease_us, commit)
    return { commit and "rl.acquire" or "rl.acquire_ro", key, limit, lease_us, 1, "US" }
end

--- `RL.RELEASE key id`: frees a held lease (the id as digits: a double prints exactly up to
--- 2^53, which the module's ids stay under).
function _M.release(key, id)
    return { "rl.release", key, format("%.0f", id) }
end

--- `RL.RENEW key id lease MS`: extends a held lease to `lease` seconds from now.
function _M.renew(key, id, lease)
    return { "rl.renew", key, format("%.0f", id), max(1, floor(lease * 1000 + 0.5)), "MS" }
end

--- `RL.ALL n keys... <each limiter's words> 1 US DETAILS`.
function _M.all(keys, words)
    local n = #keys
    local args = { "rl.all", n }
    for i = 1, n do
        args[#args + 1] = keys[i]
    end
    for i = 1, n do
        for _, word in ipairs(words[i]) do
            args[#args + 1] = word
        end
    end
    args[#args + 1] = 1
    args[#args + 1] = "US"
    args[#args + 1] = "DETAILS"
    return args
end

--- A limiter's own words in `RL.ALL` (`all`'s `words`): `THROTTLE burst count period_us`,
--- req's GCRA.
function _M.all_throttle(burst, count, period_us)
    return { "THROTTLE", burst, count, period_us }
end

--- `WINDOW limit window_us ANCHORED`: count's window, in `RL.ALL`.
function _M.all_window(limit, window_us)
    return { "WINDOW", limit, window_us, "ANCHORED" }
end

--- `LEASE limit lease_us`: conn's slot, in `RL.ALL`.
function _M.all_lease(limit, lease_us)
    return { "LEASE", limit, lease_us }
end

--- The transaction that sets `item` of `list` in the shared lists' `hash` and increments the
--- version.
function _M.lists_add(hash, list, item, value)
    return {
        { "hset", hash, list .. ":" .. item, value or "1" },
        { "hincrby", hash, "version", 1 },
    }
end

--- The transaction that removes `item` from `list` and increments the version.
function _M.lists_remove(hash, list, item)
    return {
        { "hdel", hash, list .. ":" .. item },
        { "hincrby", hash, "version", 1 },
    }
end

--- `RL.LOAD.REPORT key instance ttl_ms factor value ...`: an instance's factors (a table
--- name -> number), each finite and not negative as the module takes it, six significant
--- digits.
function _M.report(key, instance, ttl, factors)
    local words = { "rl.load.report", key, instance, max(1, floor(ttl * 1000 + 0.5)) }
    for name, value in pairs(factors) do
        value = tonumber(value) or 0
        if value ~= value or value < 0 then
            value = 0
        end
        words[#words + 1] = name
        words[#words + 1] = format("%.6g", min(value, 1e15))
    end
    return words
end

-- Replies ------------------------------------------------------------------------------

--- How many of a unit ("US", "MS") a second is.
local PER_SECOND = { US = 1e6, MS = 1e3 }
_M.PER_SECOND = PER_SECOND

--- The five integers every limiting command answers first, read: whether it was admitted,
--- the limit, what remains, the seconds until a refused request fits (nil when admitted or
--- when it never will) and until the limiter is full again, the reply's times being in
--- `unit` ("US", as the limiters send, or "MS"). As values, not a table: every limiter reads
--- its reply with it on every request's path, and maps it to its own API (a delay, an
--- excess, the connections held); specs.lua's `result` is the same, and more, in a table.
function _M.decision(reply, unit)
    local per_second = PER_SECOND[unit]
    local retry = tonumber(reply[4])
    return tonumber(reply[1]) == 0, tonumber(reply[2]), tonumber(reply[3]),
        retry >= 0 and retry / per_second or nil, tonumber(reply[5]) / per_second
end

--- The sixth integer of a reply that has one: a wait under DELAY (in the call's unit), the
--- units granted under AT_MOST, a lease's id (0 when refused).
function _M.sixth(reply)
    return tonumber(reply[6])
end

--- Where, in an `RL.ALL ... DETAILS` reply, each limiter's own five begin (its first at that
--- index, the others after it), after the five of all of them and the lease id a LEASE
--- limiter took; and that lease id (nil without one).
function _M.details(reply)
    if type(reply[6]) == "table" then
        return 6, nil
    end
    return 7, tonumber(reply[6])
end

-- `decision`'s values as a table, for `result`'s `each` and `lease_result`.
local function decision_table(fields, unit)
    local allowed, limit, remaining, retry_after, reset_after = _M.decision(fields, unit)
    return { allowed = allowed, limit = limit, remaining = remaining, retry_after = retry_after,
        reset_after = reset_after, wait = 0 }
end

--- A whole reply of any limiting call read into the table every package reads
--- (specs.lua's `result`): the five integers (times in seconds, the reply's in
--- `options.unit`, "MS" unset), the sixth (a wait under `delay`, the units `granted` under
--- `at_most`, a lease's id when `slots`: a limiter takes a slot), the level that shed the
--- request when a limiter is a load gate (`gates[i]`: the i-th is), and with several
--- limiters each rate limiter's own (`each`, the gates left out; empty for one limiter).
function _M.result(reply, options, gates, slots)
    local unit = options.unit or "MS"
    local per_second = PER_SECOND[unit]
    local n = #gates
    local gate = false
    for i = 1, n do
        gate = gate or gates[i]
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
            if not gates[i] and type(own) == "table" then
                each[#each + 1] = decision_table(own, unit)
            end
        end
    end
    local allowed, limit, remaining, retry_after, reset_after = _M.decision(reply, unit)
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

--- `RL.ACQUIRE`'s reply: the five integers and the lease's `id` (0 when refused).
function _M.lease_result(reply, unit)
    local lease = decision_table(reply, unit or "MS")
    lease.id = _M.sixth(reply)
    return lease
end

--- `RL.WINDOW.COUNTS` or (`log`) `RL.LOG.COUNTS`'s reply, times in seconds (the reply's in
--- `unit`, "MS" unset): a log's count and when its oldest and newest entries leave the
--- window; a window's previous and current counts and when each ends.
function _M.counts(reply, log, unit)
    local per_second = PER_SECOND[unit or "MS"]
    if log then
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

--- The shared lists' hash, its `HGETALL` reply (`flat`) read: { list = { item = value } },
--- any list absent reading as empty (fields `<list>:<item>`; `version` and any field without
--- a colon are no item).
function _M.lists(flat)
    local lists = setmetatable({}, { __index = function() return {} end })
    for i = 1, #flat, 2 do
        local field, value = flat[i], flat[i + 1]
        local colon = find(field, ":", 1, true)
        if colon then
            local list = sub(field, 1, colon - 1)
            local items = rawget(lists, list)
            if not items then
                items = {}
                lists[list] = items
            end
            items[sub(field, colon + 1)] = value
        end
    end
    return lists
end

--- A load report's reply (`[level, instances, share x 4]`): the level, the instances that
--- count, and the share each priority class is admitted, most important first.
function _M.standing(reply)
    local shares = {}
    for i = 1, 4 do
        shares[i] = tonumber(reply[2 + i]) or 1
    end
    return { level = tonumber(reply[1]) or 0, instances = tonumber(reply[2]) or 0,
        shares = shares }
end

return _M
