-- lua-resty-limit-traffic's `resty.limit.conn` (nginx's limit_conn: concurrent requests) on
-- the redis-ratelimit module's leases, shared by every nginx that talks to the server: a
-- request holds a slot (`RL.ACQUIRE`) that `leaving` frees (`RL.RELEASE`), and a slot that is
-- never freed (an nginx killed, a worker crashed) frees itself when its lease ends, in
-- `lease` seconds (an option of the Redis table, 60 by default). The same API and return
-- values:
--
--   local lim = conn.new(redis_options, 200, 100, 0.5)  -- 200 at once, 100 more delayed
--   local delay, conn = lim:incoming(key, true)          -- or nil, "rejected" / nil, err
--   -- in log_by_lua*: lim:leaving(key, request_time - delay)
local client = require "resty.ratelimit_module.client"
local protocol = require "resty.ratelimit_module.protocol"
local fields = require "resty.ratelimit_module.fields"

local ngx = ngx
local floor, setmetatable, assert = math.floor, setmetatable, assert
local decision = protocol.decision

local _M = { _VERSION = "0.3.0" }
local mt = { __index = _M }

--- A limiter of `max` concurrent requests, `burst` more admitted with a delay of
--- `default_conn_delay` seconds per `max` ahead of them. `redis` is the table of Redis
--- options (see resty.ratelimit_module.client), with `lease`.
function _M.new(redis, max, burst, default_conn_delay)
    local c, err = client.get(redis)
    if not c then
        return nil, err
    end
    assert(max > 0 and burst >= 0 and default_conn_delay > 0)
    return setmetatable({
        client = c,
        name = redis.name or "conn",
        prefix = redis.prefix or "",
        max = max + 0,
        burst = burst,
        unit_delay = default_conn_delay,
        lease = redis.lease or 60,
        committed = false,
    }, mt)
end

local function limit_of(self)
    return floor(self.max + self.burst)
end

local function lease_us(self)
    return floor(self.lease * 1e6 + 0.5)
end

-- The leases this request took, per limiter and key: `leaving` runs in the same request.
local function leases(self)
    local ctx = ngx.ctx
    local all = ctx.ratelimit_module_leases
    if not all then
        all = {}
        ctx.ratelimit_module_leases = all
    end
    local mine = all[self]
    if not mine then
        mine = {}
        all[self] = mine
    end
    return mine
end

-- The delay and the count of a request admitted as the `conn`th.
local function admitted(self, conn)
    if conn > self.max then
        return self.unit_delay * floor((conn - 1) / self.max), conn
    end
    return 0, conn
end

--- Notes a decision (its reply) for the HTTP fields (unless the options say `fields = false`).
function _M.note(self, reply)
    if not self.client.fields then
        return
    end
    local limit = limit_of(self)
    local allowed, _, remaining, retry_after, reset_after = decision(reply, "US")
    fields.note(self.name, self.max, self.lease, self.max - (limit - remaining), reset_after,
        not allowed, retry_after)
end

--- The command `incoming(key, commit)` sends.
function _M.command(self, key, commit)
    return protocol.acquire(key, limit_of(self), lease_us(self), commit)
end

--- Sees a request for `key`: its delay in seconds (0 within `max`) and the connections held
--- with it, or nil and "rejected" beyond `max + burst`. With `commit`, the request holds its
--- slot until `leaving` (or `uncommit`), or at most `lease` seconds.
function _M.incoming(self, key, commit)
    local c, name = self.client, self.name
    key = self.prefix .. key
    self.committed = false
    local limit = limit_of(self)
    local how, reply = c:decide(name, key, nil, self:command(key, commit))
    if how and reply then
        self:note(reply)
    end
    if how == "shadow" then
        return 0, limit + 1
    elseif how == "on_error" then
        return 0, 0
    elseif how ~= "allowed" then
        return nil, how and "rejected" or reply
    end
    local _, _, remaining = decision(reply, "US")
    local conn = limit - remaining
    if commit then
        leases(self)[key] = { id = protocol.sixth(reply), conn = conn }
        self.committed = true
    end
    local delay
    delay, conn = admitted(self, conn)
    c:count(name, delay > 0 and "delayed" or "allowed")
    return delay, conn
end

--- Whether the last `incoming` took a slot (to be freed by `leaving`).
function _M.is_committed(self)
    return self.committed
end

local function release(premature, c, key, id)
    if premature then
        return -- The worker is exiting: the lease ends on its own.
    end
    local _, err = c:call(key, protocol.release(key, id))
    if err then
        c:log_error("RL.RELEASE " .. key .. ": " .. tostring(err))
    end
end

-- The phases that may talk to Redis: there `leaving` frees the slot before it returns.
local COSOCKET_PHASES = {
    rewrite = true, access = true, content = true, timer = true, ssl_cert = true,
    ssl_session_fetch = true, ssl_client_hello = true,
}

--- The request holding a slot of `key` is done: its slot is freed, and the unit delay
--- moves towards `req_latency` (seconds) as in the original. In a phase that can talk to
--- Redis (content, access...) the slot is free when it returns, so a later `incoming` of the
--- same request sees it free; in the log phase, which cannot, through a timer. Returns the
--- connections held after it, as this request last saw them.
function _M.leaving(self, key, req_latency)
    assert(key)
    key = self.prefix .. key
    local mine = leases(self)
    local lease = mine[key]
    if not lease then
        return nil, "not found"
    end
    mine[key] = nil
    if COSOCKET_PHASES[ngx.get_phase()] then
        local _, err = self.client:call(key, protocol.release(key, lease.id))
        if err then
            return nil, err
        end
    else
        local ok, err = ngx.timer.at(0, release, self.client, key, lease.id)
        if not ok then
            return nil, err
        end
    end
    if req_latency then
        self.unit_delay = (req_latency + self.unit_delay) / 2
    end
    return lease.conn - 1
end

--- Frees the slot this request took for `key` now (in a phase that can talk to Redis):
--- the connections held after it, as this request last saw them.
function _M.uncommit(self, key)
    assert(key)
    key = self.prefix .. key
    local mine = leases(self)
    local lease = mine[key]
    if not lease then
        return nil, "not found"
    end
    mine[key] = nil
    local _, err = self.client:call(key, protocol.release(key, lease.id))
    if err then
        return nil, err
    end
    return lease.conn - 1
end

--- A new maximum of concurrent requests.
function _M.set_conn(self, conn)
    self.max = conn
    self.version = (self.version or 0) + 1
end

--- A new burst.
function _M.set_burst(self, burst)
    self.burst = burst
    self.version = (self.version or 0) + 1
end

--- What `traffic.combine` sends for this limiter in one `RL.ALL`, and how to read its reply
--- (and the lease id the call took).
function _M.combined(self)
    return protocol.all_lease(limit_of(self), lease_us(self)), function(reply, id, key)
        local _, _, remaining = decision(reply, "US")
        local conn = limit_of(self) - remaining
        leases(self)[key] = { id = id, conn = conn }
        self.committed = true
        return admitted(self, conn)
    end
end

return _M
