-- lua-resty-limit-traffic's `resty.limit.req` (nginx's limit_req: a leaky bucket and its
-- queue) on the redis-ratelimit module, shared by every nginx that talks to the server:
-- `CL.THROTTLE key <burst> <rate> ...`, GCRA whose bucket is the queue, kept on the server
-- (a request's delay is its place in the queue: the TAT before it). The same API and return
-- values:
--
--   local lim = req.new(redis_options, 200, 100)   -- 200 r/s, a queue of 100
--   local delay, excess = lim:incoming(key, true)  -- or nil, "rejected" / nil, err
local client = require "resty.ratelimit_module.client"
local protocol = require "resty.ratelimit_module.protocol"
local fields = require "resty.ratelimit_module.fields"

local floor, ceil, max = math.floor, math.ceil, math.max
local setmetatable, assert = setmetatable, assert
local decision = protocol.decision

local _M = { _VERSION = "0.3.0" }
local mt = { __index = _M }

-- The rate as count per this period (µs): 1,000 s, so that a rate has 0.001 r/s steps, as the
-- original keeps it.
local PERIOD_US = 1e9

--- A limiter of `rate` requests a second, queueing up to `burst` more (both numbers, burst
--- at least 0). `redis` is the table of Redis options (see resty.ratelimit_module.client).
function _M.new(redis, rate, burst)
    local c, err = client.get(redis)
    if not c then
        return nil, err
    end
    assert(rate > 0 and burst >= 0)
    local self = setmetatable({ client = c, name = redis.name or "req",
        prefix = redis.prefix or "" }, mt)
    self:set_rate(rate)
    self:set_burst(burst)
    return self
end

--- A new rate, in requests a second.
function _M.set_rate(self, rate)
    self.rate = rate
    self.count = max(1, floor(rate * 1000 + 0.5))
    self.templates = nil
    self.version = (self.version or 0) + 1
end

--- A new burst: how many requests may queue beyond the rate.
function _M.set_burst(self, burst)
    self.burst = burst
    self.templates = nil
    self.version = (self.version or 0) + 1
end

-- The bucket's whole requests beyond the first: `max_burst`, the same in every command this
-- limiter sends (incoming, uncommit, combine), so that they all read the key under one basis:
-- the server carries a changed rate or burst over as a share of the bucket.
local function whole_burst(self)
    return floor(self.burst)
end

-- What a fractional burst adds to the queue, in µs (DELAY's bound past the bucket), or nil.
-- Rounded up, so that a request whose turn is exactly that far away is admitted.
local function fractional_wait(self)
    local wait = ceil((self.burst - floor(self.burst)) * PERIOD_US / self.count - 1e-6)
    return wait > 0 and wait or nil
end

-- A request's wait in seconds from its reply's reset (seconds): its place in the queue, the
-- TAT before it (the reset less one emission interval). The reply is in whole µs and the
-- interval need not be: less than a µs is the rounding, not a wait (a first request's delay
-- is exactly 0, as the original's).
local function wait_of(self, reset_after)
    local wait = floor(reset_after * 1e6 + 0.5) - PERIOD_US / self.count
    return wait >= 1 and wait / 1e6 or 0
end

--- The HTTP fields of a decision (its reply), as `fields.note` takes them: a quota of the
--- burst plus one, refilled at the rate; what remains of the queue; when it is empty.
function _M.fields(self, reply)
    local q = floor(self.burst) + 1
    local allowed, _, _, retry_after, reset_after = decision(reply, "US")
    local excess = wait_of(self, reset_after) * self.rate
    return self.name, q, q / self.rate, allowed and self.burst - excess or 0, reset_after,
        not allowed, retry_after
end

--- Notes a decision (its reply) for the HTTP fields (unless the options say `fields = false`).
function _M.note(self, reply)
    if self.client.fields then
        fields.defer(self, reply)
    end
end

--- The command `incoming(key, commit)` sends.
function _M.command(self, key, commit)
    local fraction = fractional_wait(self)
    return protocol.throttle(key, whole_burst(self), self.count, PERIOD_US, 1, commit,
        fraction and "DELAY", fraction)
end

--- The command `incoming(key, commit)` sends, encoded, from templates the limiter keeps.
_M.encoded = client.encoded

-- A refusal the deny cache answered, for the HTTP fields.
local function noted_cached(self, denied)
    if self.client.fields then
        local requests = floor(self.burst) + 1
        fields.note(self.name, requests, requests / self.rate, 0, denied, true, denied)
    end
end

--- Sees a request for `key`: its delay in seconds and the excess (requests queued ahead of
--- it, itself included, per second of rate), or nil and "rejected" when the queue is full.
--- With `commit` false, nothing is recorded.
function _M.incoming(self, key, commit)
    local c, name = self.client, self.name
    key = self.prefix .. key
    local id = c.deny_cache and ("req|" .. key .. "|" .. self.count .. "|" .. self.burst)
    local how, reply = c:decide(name, key, id, self.encoded, noted_cached, self, commit)
    if how and reply then
        self:note(reply)
    end
    if how == "shadow" then
        return 0, self.burst
    elseif how == "on_error" then
        return 0, 0
    elseif how ~= "allowed" then
        return nil, how and "rejected" or reply
    end
    local _, _, _, _, reset_after = decision(reply, "US")
    local delay = wait_of(self, reset_after)
    c:count(name, delay > 0 and "delayed" or "allowed")
    return delay, delay * self.rate
end

--- Gives back the request last committed for `key` (as the original, which lowers the
--- excess by one request).
function _M.uncommit(self, key)
    key = self.prefix .. key
    local reply, err = self.client:call(key,
        protocol.throttle(key, whole_burst(self), self.count, PERIOD_US, 1, true, "REFUND"))
    if not reply then
        return nil, err
    end
    return true
end

--- Takes up to `units` of `key` at once, what fits now (`AT_MOST`), for a quota
--- (resty.ratelimit_module.quota): the units taken, and when none, the seconds until one
--- fits (nil when none ever will); or nil, the error, and whether the server failed.
function _M.lease(self, key, units, max_wait_us)
    key = self.prefix .. key
    local option = max_wait_us and "DELAY" or "AT_MOST"
    return self.client:lease(key, protocol.throttle(key, whole_burst(self), self.count,
        PERIOD_US, units, true, option, max_wait_us), max_wait_us and units)
end

--- The most one lease may take at once: the bucket.
function _M.capacity(self)
    return whole_burst(self) + 1
end

--- Gives back `units` of `key` a quota took and did not spend.
function _M.give_back(self, key, units)
    key = self.prefix .. key
    return self.client:call(key,
        protocol.throttle(key, whole_burst(self), self.count, PERIOD_US, units, true, "REFUND"))
end

--- What `traffic.combine` sends for this limiter in one `RL.ALL`: GCRA with the burst as
--- its bucket (a request's delay is then its place in the queue, as with DELAY), and how
--- to read its own reply back: the delay and the excess.
function _M.combined(self)
    return protocol.all_throttle(whole_burst(self), self.count, PERIOD_US), function(reply)
        local _, _, _, _, reset_after = decision(reply, "US")
        local delay = wait_of(self, reset_after)
        return delay, delay * self.rate
    end
end

return _M
