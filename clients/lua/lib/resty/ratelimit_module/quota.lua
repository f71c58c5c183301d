-- Quota leases for one hot limit, in the gateway: the workers of one nginx share units taken
-- from the server in batches, in a lua_shared_dict, so that most requests are decided in the
-- dict without a round trip. The Quota of the Python and Node packages, for nginx:
--
--   lua_shared_dict ratelimit_quota 1m;
--   local q = quota.new(lim, { dict = "ratelimit_quota", batch = 100, hold = 0.5 })
--   local delay, err = q:incoming(key)    -- 0; or nil, "rejected"; or nil, err
--
-- `lim` is a `req` or `count` limiter of this package. A request spends one unit the dict
-- holds for its key. When what is left falls below half the batch, the request that saw it
-- tops the dict up to `batch` in the background (a timer, so that no request waits for it);
-- when none is left, one request takes up to `batch` in one call (`AT_MOST`: what fits now)
-- and the requests that find a call under way ask the server for themselves alone. Units
-- unspent `hold` seconds after they were taken go back (`REFUND`).
--
-- The bound: every unit spent was counted by the server when it was taken, and an nginx
-- holds at most `batch` taken earlier (one call at a time takes units, never more than the
-- batch less what is left).
-- So in any window, what N nginx admit exceeds what the server alone would admit by at most
-- N x batch, whatever their workers. `req` is then a bucket without its queue: a request is
-- admitted at once or refused (nodelay).
--
-- While the limit binds, a lease stays batched. A call that gets less than it asked for (the
-- units that refilled since the last one) marks the limit as binding, in the dict; from then
-- on a call asks for half a batch at once, waiting for it on the server (`DELAY`, up to
-- `hold`): the server answers when it fits, the units go into the dict then (a timer), and
-- until then the workers refuse from the dict, as they do until a refusal's `retry_after`; a
-- request that finds a call under way is refused too, without a call of its own. So a binding
-- limit costs at most one call per half batch admitted. A call that finds half a batch there
-- at once asks for a whole batch again (`AT_MOST`). Half a batch is at most the limiter's
-- bucket (`req`) or limit (`count`).
local ngx = ngx
local ngx_now = ngx.now
local ceil, floor, max, min = math.ceil, math.floor, math.max, math.min
local setmetatable, tostring = setmetatable, tostring

local _M = { _VERSION = "0.3.0" }
local mt = { __index = _M }

-- Subtracted at once to take every unit left (far above any batch).
local ALL = 2 ^ 40

--- A quota over `limiter` (this package's `req` or `count`); `options`: `dict`, the
--- lua_shared_dict's name (required), `batch` (units per server call, 100) and `hold`
--- (seconds before unspent units go back, 1).
function _M.new(limiter, options)
    options = options or {}
    local dict = options.dict and ngx.shared[options.dict]
    if not dict then
        return nil, "dict: a lua_shared_dict's name is required"
    end
    if not limiter or not limiter.lease then
        return nil, "the limiter is this package's req or count"
    end
    local batch, hold = options.batch or 100, options.hold or 1
    if batch < 1 or hold <= 0 then
        return nil, "batch is at least 1 and hold more than 0 seconds"
    end
    -- The dict's keys name the limiter by its kind and parameters, so that the workers of an
    -- nginx, which each make their own, share them, and two limiters never do.
    local prefix = table.concat({ limiter.name, limiter.prefix, limiter.count or limiter.limit,
        limiter.burst or limiter.window_us, "" }, "|")
    return setmetatable({ limiter = limiter, dict = dict, batch = batch, hold = hold,
        low = batch / 2, half = min(ceil(batch / 2), limiter:capacity()),
        hold_us = floor(hold * 1e6), prefix = prefix, names = {}, named = 0,
        counter = limiter.client, policy = limiter.name }, mt)
end

-- Gives back what is left of `key`'s units (the timer at a batch's hold end): all of them at
-- once, atomically, so that no worker spends a unit that goes back.
local function give_back(premature, self, key)
    local dict = self.dict
    dict:delete(self.prefix .. "t|" .. key)
    local units = self.prefix .. "u|" .. key
    local after = dict:incr(units, -ALL, 0)
    if not after then
        return
    end
    local had = after + ALL
    local taken = max(had, 0)
    -- What was not ours to take (a worker's spend under way, undone on its own) is left.
    dict:incr(units, ALL - taken, 0)
    if taken > 0 then
        local _, err = self.limiter:give_back(key, taken)
        if err and not premature then
            ngx.log(ngx.WARN, "ratelimit_module: quota: giving back ", taken, " of ", key, ": ",
                err)
        end
    end
end

-- Puts `units` taken for `key` into the dict, and a timer to give back what is unspent
-- after `hold`.
local function store(self, key, units)
    local dict = self.dict
    dict:incr(self.prefix .. "u|" .. key, units, 0)
    -- One give-back pending per key and nginx: it takes back what is left then, the units of
    -- later top-ups included (they are given back early, never late).
    if dict:add(self.prefix .. "t|" .. key, true, self.hold) then
        local ok = ngx.timer.at(self.hold, give_back, self, key)
        if not ok then
            dict:delete(self.prefix .. "t|" .. key)
        end
    end
end

-- The units of a take the server made wait, once it may be spent (a timer's function).
local function deposit(premature, self, key, units)
    if premature then
        self.limiter:give_back(key, units)
        return
    end
    store(self, key, units)
end

-- Takes units for `key` (this worker holds the lock): up to `wanted` (`AT_MOST`), or while
-- the limit binds half a batch, waited for (`DELAY`); the units into the dict (one kept for
-- the request that found none, when `keep`). Whether that request is admitted: true, false
-- (refused), or nil and the error.
local function refill(self, key, wanted, keep)
    local dict, prefix = self.dict, self.prefix
    local binding = dict:get(prefix .. "b|" .. key)
    local asked = binding and self.half or wanted
    local granted, retry_or_err, failed, wait = self.limiter:lease(key, asked,
        binding and self.hold_us or nil)
    dict:delete(prefix .. "l|" .. key)
    if not granted then
        if failed then
            local admit = self.limiter.client:on_failure(self.limiter.name)
            if admit ~= nil then
                return admit
            end
        end
        return nil, retry_or_err
    end
    if granted == 0 then
        if retry_or_err then
            dict:set(prefix .. "r|" .. key, ngx_now() + retry_or_err, retry_or_err)
        end
        if self.batch > 1 then
            dict:set(prefix .. "b|" .. key, true)
        end
        self.limiter.client:count(self.limiter.name, "refused")
        return false
    end
    if binding and wait > 0 then
        -- Spent once the server's wait is over: until then the workers refuse from the dict.
        dict:set(prefix .. "r|" .. key, ngx_now() + wait, wait)
        if not ngx.timer.at(wait, deposit, self, key, granted) then
            self.limiter:give_back(key, granted)
        end
        self.limiter.client:count(self.limiter.name, "refused")
        return false
    elseif binding then
        -- Half a batch was there at once: the limit may no longer bind.
        dict:delete(prefix .. "b|" .. key)
    elseif granted < asked and self.batch > 1 then
        dict:set(prefix .. "b|" .. key, true)
    end
    -- One unit is this request's, when it found none; the rest are the workers'.
    local stored = keep and granted - 1 or granted
    if stored > 0 then
        store(self, key, stored)
    end
    if keep then
        self.limiter.client:count(self.limiter.name, "allowed")
    end
    return true
end

-- The background top-up (a timer's function).
local function top_up(premature, self, key, wanted)
    if premature then
        self.dict:delete(self.prefix .. "l|" .. key)
        return
    end
    local ok, err = refill(self, key, wanted, false)
    if ok == nil and err then
        ngx.log(ngx.WARN, "ratelimit_module: quota: topping up ", key, ": ", err)
    end
end

-- Takes the lock on `key`'s calls: true when this request may call (no call under way).
local function lock(self, key)
    return self.dict:add(self.prefix .. "l|" .. key, true,
        max(1, self.limiter.client.timeout / 1000))
end

-- Whether the server said to wait before the next call for `key`: a refusal's retry_after,
-- or the wait of half a batch it scheduled.
local function waiting(self, key)
    local refused_until = self.dict:get(self.prefix .. "r|" .. key)
    return refused_until and refused_until > ngx_now()
end

-- The dict's key of `key`'s units, kept per worker (a quota limits a few hot keys; the
-- names are made again past 10,000 of them).
local function units_key(self, key)
    local names = self.names
    local name = names[key]
    if not name then
        if self.named >= 10000 then
            names = {}
            self.names, self.named = names, 0
        end
        name = self.prefix .. "u|" .. key
        names[key] = name
        self.named = self.named + 1
    end
    return name
end

--- Sees a request for `key`: 0 when admitted, or nil and "rejected", or nil and the error
--- (or what `on_error` decides, when the server failed).
function _M.incoming(self, key)
    local dict, prefix = self.dict, self.prefix
    local left = dict:incr(units_key(self, key), -1, 0)
    if left and left >= 0 then
        self.counter:count(self.policy, "quota")
        -- Topped up in the background, unless the server said to wait (a refusal, or half a
        -- batch it made wait for).
        if left < self.low and not waiting(self, key) and lock(self, key) then
            local ok = ngx.timer.at(0, top_up, self, key, self.batch - left)
            if not ok then
                dict:delete(prefix .. "l|" .. key)
            end
        end
        return 0
    end
    -- None left: undo, then take a batch, unless the limit binds for a while yet.
    dict:incr(units_key(self, key), 1, 0)
    if waiting(self, key) then
        return nil, "rejected"
    end
    local admitted, err
    if lock(self, key) then
        admitted, err = refill(self, key, self.batch, true)
    elseif dict:get(prefix .. "b|" .. key) then
        -- The limit binds and a call is under way: none of its own.
        self.counter:count(self.policy, "refused")
        return nil, "rejected"
    else
        -- Another worker is taking the batch: this request asks for itself.
        local delay
        delay, err = self.limiter:incoming(key, true)
        admitted = delay ~= nil
        if not admitted and err == "rejected" then
            admitted, err = false, nil
        end
    end
    if admitted then
        return 0
    elseif admitted == false then
        return nil, "rejected"
    end
    return nil, tostring(err)
end

--- Gives back what `key`'s units still hold now (as the hold's end would).
function _M.close(self, key)
    give_back(false, self, key)
end

return _M
