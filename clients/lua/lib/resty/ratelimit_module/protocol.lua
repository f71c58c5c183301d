-- What the package sends, in one place: the words of every command it makes (names in lower
-- case, as the client sends them; times in microseconds, "US", but a lease's renewal in
-- milliseconds). clients/conformance.json's `lua` part, and its leases', lists' and load
-- reports' parts, pin them: adding a command is one function here and one case there. Each
-- limiter reads its own reply (a delay, an excess, the connections held: its API's terms).

local format = string.format
local floor, max = math.floor, math.max

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
        words[#words + 1] = format("%.6g", math.min(value, 1e15))
    end
    return words
end

return _M
