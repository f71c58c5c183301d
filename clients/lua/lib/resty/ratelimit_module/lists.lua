-- Lists and settings shared by every gateway and application through Redis: one hash per set
-- of lists, fields `<list>:<item>` (an allow list of callers, a deny list of keys, limited
-- APIs, thresholds...) and a `version` field that every change increments. Each nginx
-- worker keeps a copy, read again when the version changes: it polls the version (one
-- `HGET` per `every` seconds per worker, not a call per request), so a change reaches every
-- gateway within that time, without a reload. The Python and Node packages read and write
-- the same hash (`ratelimit_module.SharedLists`, `SharedLists`).
--
--   -- init_worker_by_lua_block:
--   require("resty.ratelimit_module.lists").watch(REDIS, "gateway:lists", 0.5)
--   -- access_by_lua_block:
--   local lists = require("resty.ratelimit_module.lists").get("gateway:lists")
--   if lists.deny[key] then ... end            -- lists.<list>[<item>] is the item's value
local client = require "resty.ratelimit_module.client"

local ngx = ngx
local find, sub = string.find, string.sub

local _M = { _VERSION = "0.3.0" }

-- Per worker: the copy of each hash, and the version it was read at.
local copies, versions = {}, {}

-- An empty copy: any list reads as empty.
local EMPTY = setmetatable({}, { __index = function() return {} end })

--- The lists of `hash` as this worker last read them: `lists[list][item]` is the item's
--- value (nil when absent). Empty until the first read.
function _M.get(hash)
    return copies[hash] or EMPTY
end

--- Reads `hash` into lists: { list = { item = value } }.
local function parse(flat)
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

--- Reads `hash` again if its version changed (or never read): true when it was read.
function _M.refresh(c, hash)
    local version, err = c:call(hash, { "hget", hash, "version" })
    if version == nil then
        return nil, err
    end
    if copies[hash] and version == versions[hash] then
        return false
    end
    local flat
    flat, err = c:call(hash, { "hgetall", hash })
    if not flat then
        return nil, err
    end
    copies[hash], versions[hash] = parse(flat), version
    return true
end

local function tick(premature, c, hash)
    if premature then
        return
    end
    local _, err = _M.refresh(c, hash)
    if err then
        c:log_error("lists " .. hash .. ": " .. tostring(err))
    end
end

--- Keeps this worker's copy of `hash` current, reading its version every `every` seconds
--- (call it from init_worker_by_lua*). The first read happens at once.
function _M.watch(redis, hash, every)
    local c, err = client.get(redis)
    if not c then
        return nil, err
    end
    local ok
    ok, err = ngx.timer.at(0, tick, c, hash)
    if not ok then
        return nil, err
    end
    return ngx.timer.every(every or 1, tick, c, hash)
end

--- Sets `item` of `list` to `value` ("1" by default) in `hash`, and increments its version,
--- in one MULTI/EXEC (from a phase that can talk to Redis).
function _M.add(redis, hash, list, item, value)
    local c, err = client.get(redis)
    if not c then
        return nil, err
    end
    return c:transaction(hash, {
        { "hset", hash, list .. ":" .. item, value or "1" },
        { "hincrby", hash, "version", 1 },
    })
end

--- Removes `item` from `list` in `hash`, and increments its version.
function _M.remove(redis, hash, list, item)
    local c, err = client.get(redis)
    if not c then
        return nil, err
    end
    return c:transaction(hash, {
        { "hdel", hash, list .. ":" .. item },
        { "hincrby", hash, "version", 1 },
    })
end

return _M
