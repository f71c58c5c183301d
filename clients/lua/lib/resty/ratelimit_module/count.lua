-- lua-resty-limit-traffic's `resty.limit.count` (a fixed window from the first request, as
-- GitHub's API limits) on the redis-ratelimit module, shared by every nginx that talks to
-- the server: `RL.WINDOW key limit window ANCHORED`. The same API and return values:
--
--   local lim = count.new(redis_options, 5000, 3600)  -- 5,000 an hour
--   local delay, remaining = lim:incoming(key, true)  -- 0, remaining; or nil, "rejected"
--
-- Unlike the original, a refused request counts nothing.
local client = require "resty.ratelimit_module.client"
local protocol = require "resty.ratelimit_module.protocol"
local fields = require "resty.ratelimit_module.fields"

local floor, setmetatable, assert = math.floor, setmetatable, assert
local decision = protocol.decision

local _M = { _VERSION = "0.3.0" }
local mt = { __index = _M }

--- A limiter of `limit` requests per `window` seconds, the window starting at a key's first
--- request. `redis` is the table of Redis options (see resty.ratelimit_module.client).
function _M.new(redis, limit, window)
    local c, err = client.get(redis)
    if not c then
        return nil, err
    end
    assert(limit > 0 and window > 0)
    return setmetatable({ client = c, name = redis.name or "count", prefix = redis.prefix or "",
        limit = floor(limit), window_us = floor(window * 1e6 + 0.5), window = window }, mt)
end

--- The HTTP fields of a decision (its reply), as `fields.note` takes them.
function _M.fields(self, reply)
    local allowed, _, remaining, retry_after, reset_after = decision(reply, "US")
    return self.name, self.limit, self.window, remaining, reset_after, not allowed, retry_after
end

--- Notes a decision (its reply) for the HTTP fields (unless the options say `fields = false`).
function _M.note(self, reply)
    if self.client.fields then
        fields.defer(self, reply)
    end
end

--- The command `incoming(key, commit)` sends.
function _M.command(self, key, commit)
    return protocol.window(key, self.limit, self.window_us, 1, commit)
end

--- The command `incoming(key, commit)` sends, encoded, from templates the limiter keeps.
_M.encoded = client.encoded

-- A refusal the deny cache answered, for the HTTP fields.
local function noted_cached(self, denied)
    if self.client.fields then
        fields.note(self.name, self.limit, self.window, 0, denied, true, denied)
    end
end

--- Sees a request for `key`: 0 and the requests remaining in its window, or nil and
--- "rejected". With `commit` false, nothing is recorded.
function _M.incoming(self, key, commit)
    local c, name = self.client, self.name
    key = self.prefix .. key
    local id = c.deny_cache and ("count|" .. key .. "|" .. self.limit .. "|" .. self.window_us)
    local how, reply = c:decide(name, key, id, self.encoded, noted_cached, self, commit)
    if how and reply then
        self:note(reply)
    end
    if how == "shadow" or how == "on_error" then
        return 0, 0
    elseif how ~= "allowed" then
        return nil, how and "rejected" or reply
    end
    local _, _, remaining = decision(reply, "US")
    c:count(name, "allowed")
    return 0, remaining
end

--- Gives back one request of `key`'s window: the requests remaining after.
function _M.uncommit(self, key)
    key = self.prefix .. key
    local reply, err = self.client:call(key,
        protocol.window(key, self.limit, self.window_us, 1, true, "REFUND"))
    if not reply then
        return nil, err
    end
    local _, _, remaining = decision(reply, "US")
    return remaining
end

--- Takes up to `units` of `key` at once, what fits now (`AT_MOST`), for a quota
--- (resty.ratelimit_module.quota): the units taken, and when none, the seconds until one
--- fits (nil when none ever will); or nil, the error, and whether the server failed.
function _M.lease(self, key, units, max_wait_us)
    key = self.prefix .. key
    local option = max_wait_us and "DELAY" or "AT_MOST"
    return self.client:lease(key, protocol.window(key, self.limit, self.window_us, units, true,
        option, max_wait_us), max_wait_us and units)
end

--- The most one lease may take at once: the limit.
function _M.capacity(self)
    return self.limit
end

--- Gives back `units` of `key` a quota took and did not spend.
function _M.give_back(self, key, units)
    key = self.prefix .. key
    return self.client:call(key,
        protocol.window(key, self.limit, self.window_us, units, true, "REFUND"))
end

--- What `traffic.combine` sends for this limiter in one `RL.ALL`, and how to read its reply.
function _M.combined(self)
    return protocol.all_window(self.limit, self.window_us), function(reply)
        local _, _, remaining = decision(reply, "US")
        return 0, remaining
    end
end

return _M
