-- lua-resty-limit-traffic's `resty.limit.traffic.combine` on the redis-ratelimit module:
-- every limiter decided in one `RL.ALL` call, all or nothing, atomic, one round trip. The
-- original checks each limiter, then commits them one by one and uncommits on a failure; here
-- a refused request is charged nowhere, and a `conn` limiter's slot is taken only if every
-- rate admits (nginx's limit_conn with limit_req). The same API and return values:
--
--   local delay, err = traffic.combine({ lim_req, lim_conn }, { key1, key2 }, states)
--
-- Limiters that share one server (one table of Redis options, but for `name`, `lease` and
-- `prefix`) are decided in one call; on a Redis Cluster their keys must share a hash slot:
-- give them one {hash tag}, as "{client:42}:req". Each limiter's `prefix` goes before its
-- key, as in `incoming`. Any other limiter (another package's, with `incoming` and
-- `uncommit`, or this package's on another server) is combined as the original does, one by
-- one; an error is returned (nil, err), never raised.
local client = require "resty.ratelimit_module.client"
local protocol = require "resty.ratelimit_module.protocol"

local tostring, type, pcall = tostring, type, pcall
local setmetatable = setmetatable
local max, concat = math.max, table.concat

local _M = { _VERSION = "0.3.0" }

--- The one `RL.ALL` call for `limiters[i]` on `keys[i]`, and each limiter's reader of its
--- own reply.
function _M.command(limiters, keys)
    local n = #limiters
    local prefixed, words, readers = {}, {}, {}
    for i = 1, n do
        prefixed[i] = limiters[i].prefix .. keys[i]
        words[i], readers[i] = limiters[i]:combined()
    end
    return protocol.all(prefixed, words), readers
end

-- The original's combine, for limiters that cannot share one call (another package's, or
-- this package's on other servers): each checked, then committed one by one, the committed
-- ones given back when a later one refuses. Any object with `incoming` and `uncommit`.
local function one_by_one(limiters, keys, states)
    local n = #limiters
    local max_delay = 0
    for i = 1, n do
        local delay, err = limiters[i]:incoming(keys[i], i == n)
        if not delay then
            return nil, err
        end
        if i == n then
            if states then
                states[i] = err
            end
            max_delay = delay
        end
    end
    for i = 1, n - 1 do
        local delay, err = limiters[i]:incoming(keys[i], true)
        if not delay then
            for j = 1, i - 1 do
                limiters[j]:uncommit(keys[j])
            end
            limiters[n]:uncommit(keys[n])
            return nil, err
        end
        if states then
            states[i] = err
        end
        max_delay = max(max_delay, delay)
    end
    return max_delay
end

-- What a combination of limiters sends, made once per combination and kept (the limiters
-- as keys, nested, weakly: a combination goes with its limiters), and made again when a
-- limiter's parameters changed (its `version`, which its setters move): the words of its
-- `RL.ALL` but the keys, encoded, its readers, and its policy's name.
local prepared = setmetatable({}, { __mode = "k" })

local function prepare(limiters)
    local node = prepared
    for i = 1, #limiters do
        local next_node = node[limiters[i]]
        if not next_node then
            next_node = setmetatable({}, { __mode = "k" })
            node[limiters[i]] = next_node
        end
        node = next_node
    end
    local n = #limiters
    local combination = node[true]
    if combination then
        local versions = combination.versions
        local current = true
        for i = 1, n do
            if versions[i] ~= (limiters[i].version or 0) then
                current = false
                break
            end
        end
        if current then
            return combination
        end
    end
    local keys, names, versions = {}, {}, {}
    for i = 1, n do
        keys[i] = ""
        names[i] = limiters[i].name
        versions[i] = limiters[i].version or 0
    end
    local args, readers = _M.command(limiters, keys)
    combination = {
        -- The array's header, the command's name and the count; then the keys; then the rest.
        head = "*" .. #args .. "\r\n" .. client.encode_args(args, 1, 2),
        tail = client.encode_args(args, 3 + n),
        readers = readers,
        policy = concat(names, "+"),
        versions = versions,
    }
    node[true] = combination
    return combination
end

-- The RL.ALL of `combination` for `keys` (each limiter's prefix put before its key), encoded,
-- and the first key (where a Cluster routes it).
local function encoded(combination, limiters, keys)
    local n = #limiters
    local parts = {}
    local first
    for i = 1, n do
        local key = limiters[i].prefix .. keys[i]
        first = first or key
        parts[i] = "$" .. #key .. "\r\n" .. key .. "\r\n"
    end
    return combination.head .. concat(parts) .. combination.tail, first
end

--- The one `RL.ALL` call for `limiters[i]` on `keys[i]`, encoded, as `combine` sends it:
--- what `client.encode` gives of `command`'s words, from the combination's cached parts.
function _M.encode(limiters, keys)
    return (encoded(prepare(limiters), limiters, keys))
end

-- Whether every limiter is this package's on one server: then one RL.ALL decides them all.
local function one_call(limiters)
    local c = limiters[1].client
    for i = 1, #limiters do
        local lim = limiters[i]
        if type(lim) ~= "table" or type(lim.combined) ~= "function" or lim.client ~= c
            or type(lim.prefix) ~= "string" then
            return false
        end
    end
    return c ~= nil
end

--- Decides `limiters[i]` for `keys[i]`, every i at once: the largest delay, or nil and
--- "rejected" (or the error). `states[i]`, when given, receives each limiter's second value
--- (req: the excess; count: the remaining; conn: the connections). Limiters of this package
--- on one server are decided in one atomic call; any others (another package's, or on other
--- servers) as the original does, one by one.
function _M.combine(limiters, keys, states)
    local n = #limiters
    if n == 0 then
        return 0
    end
    if not one_call(limiters) then
        local ok, delay, err = pcall(one_by_one, limiters, keys, states)
        if not ok then
            return nil, tostring(delay)
        end
        return delay, err
    end
    local c = limiters[1].client
    local combination = prepare(limiters)
    local readers, policy = combination.readers, combination.policy
    local command, first_key = encoded(combination, limiters, keys)
    -- The encoded call names every key and parameter: the deny cache's entry.
    local id = c.deny_cache and ("all|" .. command)
    local how, reply = c:decide(policy, first_key, id, command)
    local first, lease_id
    if how and reply then
        first, lease_id = protocol.details(reply)
        for i = 1, n do
            limiters[i]:note(reply[first + i - 1])
        end
    end
    if how == "shadow" or how == "on_error" then
        return 0
    elseif how ~= "allowed" then
        return nil, how and "rejected" or reply
    end
    local max_delay = 0
    for i = 1, n do
        local delay, state = readers[i](reply[first + i - 1], lease_id,
            limiters[i].prefix .. keys[i])
        if states then
            states[i] = state
        end
        max_delay = max(max_delay, delay)
    end
    c:count(policy, max_delay > 0 and "delayed" or "allowed")
    return max_delay
end


return _M
