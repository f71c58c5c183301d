-- Lists and settings shared by every gateway and application through Redis: one hash per set
-- of lists, fields `<list>:<item>` (an allow list of callers, a deny list of keys, limited
-- APIs, thresholds...) and a `version` field that every change increments. Each nginx
-- worker keeps a copy, read again when the version changes: it polls the version (one
-- `HGET` per `every` seconds per worker, not a call per request), so a change reaches every
-- gateway within that time, without a reload. The Python and Node packages read and write
-- the same hash (`ratelimit_module.SharedLists`, `SharedLists`).
--
--   -- init_worker_by_lua_block (lua_shared_dict ratelimit_lists 1m;):
--   require("resty.ratelimit_module.lists").watch(REDIS, "gateway:lists", 0.5, "ratelimit_lists")
--
-- With a lua_shared_dict's name (the fourth argument), every read is kept in it too, and a
-- worker starts from it: a HUP reload keeps a shared dict, so new workers start with the last
-- lists read, even while the server cannot be reached.
--   -- access_by_lua_block:
--   local lists = require("resty.ratelimit_module.lists").get("gateway:lists")
--   if lists.deny[key] then ... end            -- lists.<list>[<item>] is the item's value
local client = require "resty.ratelimit_module.client"
local protocol = require "resty.ratelimit_module.protocol"

local ngx = ngx
local find, sub, tonumber, tostring, type = string.find, string.sub, tonumber, tostring, type

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

-- The flat reply of HGETALL as one string, and back: each string as its length, ":", itself.
local function encode(flat)
    local parts = {}
    for i = 1, #flat do
        parts[i] = #flat[i] .. ":" .. flat[i]
    end
    return table.concat(parts)
end

local function decode(text)
    local flat, at = {}, 1
    while at <= #text do
        local colon = find(text, ":", at, true)
        local length = colon and tonumber(sub(text, at, colon - 1))
        if not length then
            return nil
        end
        flat[#flat + 1] = sub(text, colon + 1, colon + length)
        at = colon + length + 1
    end
    return flat
end

-- The shared dict each hash is kept in, when `watch` was given one.
local kept = {}

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
    copies[hash], versions[hash] = protocol.lists(flat), version
    local dict = kept[hash]
    if dict then
        local ok, failure = dict:set("lists|" .. hash, encode(flat))
        if ok then
            -- No version field reads as ngx.null, which a shared dict cannot hold.
            dict:set("version|" .. hash, type(version) == "string" and version or nil)
        else
            c:log_error("lists " .. hash .. ": not kept in the shared dict: " .. tostring(failure))
        end
    end
    return true
end

-- Starts this worker from what the shared dict kept of `hash`, if anything.
local function restore(dict, hash)
    local text = dict:get("lists|" .. hash)
    local flat = text and decode(text)
    if flat then
        copies[hash], versions[hash] = protocol.lists(flat), dict:get("version|" .. hash)
    end
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
--- (call it from init_worker_by_lua*). The first read happens at once. With `dict` (a
--- lua_shared_dict's name), each read is kept there and the worker starts from it.
function _M.watch(redis, hash, every, dict)
    local c, err = client.get(redis)
    if not c then
        return nil, err
    end
    if dict then
        local shared = ngx.shared[dict]
        if not shared then
            return nil, "lists: shared dict " .. tostring(dict) .. " not found"
        end
        kept[hash] = shared
        restore(shared, hash)
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
    return c:transaction(hash, _M.add_commands(hash, list, item, value))
end

-- The transactions (resty.ratelimit_module.protocol).
_M.add_commands = protocol.lists_add
_M.remove_commands = protocol.lists_remove

--- Removes `item` from `list` in `hash`, and increments its version.
function _M.remove(redis, hash, list, item)
    local c, err = client.get(redis)
    if not c then
        return nil, err
    end
    return c:transaction(hash, _M.remove_commands(hash, list, item))
end

return _M
