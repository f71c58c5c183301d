-- The worker's own limit on requests in flight, decided at admission with no server call
-- (docs/load.md, "The local limit"): it follows measured latency, cuts when a standing queue
-- forms (CoDel's test: an interval whose fastest request still waited), grows back while none
-- does, and while congested reserves its top places for the more important classes (trunk
-- reservation) and refuses a request below the top class that waited past its share of the
-- target (CoDel's sojourn, per request). The same algorithm, step for step, as every package's
-- (clients/conformance.json, `concurrency`). Plain Lua, no I/O: the clock is passed in.
local huge, min, max, sqrt = math.huge, math.min, math.max, math.sqrt
local pairs, setmetatable = pairs, setmetatable

local _M = { _VERSION = "0.3.0" }
local mt = { __index = _M }

-- How many intervals in a row (of those that finished a request) must have taken a latency for
-- it to be the no-load latency.
local CONFIRMING = 4
-- How many calm intervals in a row (of those that decided a request) end congestion: one is an
-- overload's arrivals coming and going.
local CALM_INTERVALS_TO_END = 4

-- The most routes whose latencies are kept apart; a request of any other route is counted with
-- those that name none.
local ROUTES = 32

-- The key of the requests that name no route.
local UNNAMED = {}

-- `count` intervals that finished no request yet.
local function unmeasured(count)
    local fastest = {}
    for i = 1, count do
        fastest[i] = huge
    end
    return fastest
end

-- The no-load latency of one route (or of the whole service): the least of the current and the
-- previous epoch that CONFIRMING intervals in a row (of those that finished one of its requests)
-- took at least; until CONFIRMING - 1 such intervals have ended, also the least any request
-- took (a cold start's).
local function latencies()
    return {
        noload_now = huge,
        noload_before = huge,
        -- The fastest request of each of the last intervals that finished any, oldest first.
        recent_fastest = unmeasured(CONFIRMING - 1),
        -- The fastest request of the current interval.
        window_min = huge,
    }
end

local function noload_of(latency)
    return min(latency.noload_now, latency.noload_before)
end

-- Whether CONFIRMING - 1 intervals have finished a request: past the cold start.
local function confirmed(latency)
    return latency.recent_fastest[1] < huge
end

local function finished_in(latency, took)
    latency.window_min = min(latency.window_min, took)
    if not confirmed(latency) then
        latency.noload_now = min(latency.noload_now, took)
    end
end

-- The interval ended: its fastest lowers the no-load latency as far as the intervals before it
-- agree (a fast request now and then is not what the others take).
local function close_interval(latency)
    if latency.window_min < huge then
        local recent = latency.recent_fastest
        local agreed = latency.window_min
        for i = 1, CONFIRMING - 1 do
            agreed = max(agreed, recent[i])
        end
        latency.noload_now = min(latency.noload_now, agreed)
        for i = 1, CONFIRMING - 2 do
            recent[i] = recent[i + 1]
        end
        recent[CONFIRMING - 1] = latency.window_min
    end
    latency.window_min = huge
end

-- The route whose fastest request of the interval reads it: of the routes that finished a
-- request in it with a no-load latency known (past their cold start, if any is), the fastest by
-- nature (then by its fastest, so that the order never matters); nil if no route did.
local function judging_route(self)
    local judge, judge_confirmed = nil, false
    for _, route in pairs(self.routes) do
        local noload = noload_of(route)
        if route.window_min < huge and noload < huge then
            local past = confirmed(route)
            local better = not judge
                or (past and not judge_confirmed)
                or (
                    past == judge_confirmed
                    and (
                        noload < noload_of(judge)
                        or (noload == noload_of(judge) and route.window_min < judge.window_min)
                    )
                )
            if better then
                judge, judge_confirmed = route, past
            end
        end
    end
    return judge
end

-- The parameters every package ships: times in whole microseconds (so that every package
-- compares them exactly), shares most important class first.
_M.DEFAULTS = {
    initial = 20,
    floor = 4,
    ceiling = 1000,
    interval_us = 100000,
    target_us = 5000,
    enter = 4,
    deep = 4,
    epoch_us = 30000000,
    decay = 0.95,
    shares = { 1, 0.6, 0.4, 0.2 },
    -- While congested, a request below the top class is refused once its wait passes `sojourn`
    -- times its share of the target; math.huge: never (a wait known only as a bound).
    sojourn = 1,
}

--- A limit with `opts` over the defaults.
function _M.new(opts)
    local o = {}
    for name, value in pairs(_M.DEFAULTS) do
        o[name] = value
    end
    for name, value in pairs(opts or {}) do
        o[name] = value
    end
    return setmetatable({
        options = o,
        limit = o.initial,
        inflight = 0,
        congested = false,
        -- How many times the limit changed, and congestion began (for the bench).
        changes = 0,
        congestions = 0,
        window_end = nil,
        peak = 0,
        -- The interval's admitted and refused requests, and of those refused, how many for
        -- their own wait.
        admitted = 0,
        refused = 0,
        waited_out = 0,
        -- Of the refused, how many the service's level refused (not this limit's shares).
        by_level = 0,
        -- Whether the limit refused a request while not congested: the requests in flight
        -- reached it (or the initial limit).
        full = false,
        -- The interval's finished requests, how many of them took longer than the target, and
        -- the fewest requests in flight it saw.
        finished = 0,
        queued = 0,
        trough = 0,
        -- The requests left waiting when the last request finished, where the package counts
        -- them (a run queue's): a service whose requests in flight fall to none between two
        -- requests while the next ones wait is not idle.
        behind = 0,
        standing_run = 0,
        -- While congested, intervals in a row (of those that decided a request) that ended
        -- with the peak under half the limit and fewer refused than admitted.
        calm_run = 0,
        -- Intervals in a row whose latency no queue here explains.
        unexplained = 0,
        -- Every request's latencies (what admission converts a wait with), and each route's
        -- (what the standing-queue test reads: a route's fastest against its own target), the
        -- requests that name none, or a route past the first ROUTES, under UNNAMED.
        service = latencies(),
        routes = { [UNNAMED] = latencies() },
        named_routes = 0,
        epoch_end = 0,
    }, mt)
end

--- The service's no-load latency, over every route: the least of this epoch and the last
--- (math.huge before any).
function _M.noload(self)
    return noload_of(self.service)
end

--- The routes whose latencies are kept apart, as their requests named them.
function _M.route_names(self)
    local names = {}
    for name in pairs(self.routes) do
        if name ~= UNNAMED then
            names[#names + 1] = name
        end
    end
    return names
end

-- The latency a request may take without a queue standing: the no-load latency plus the
-- longer of one more and `target_us` (a burst's queue), or, while congested, plus `target_us`
-- alone (CoDel's), so that the queue kept while shedding stays short where requests are slow
-- by nature, behind a pool of a few slots.
local function target_of(self, noload)
    local target_us = self.options.target_us
    return noload + (self.congested and target_us or max(noload, target_us))
end

-- Closes the interval that ended at or before `now`, if any.
local function roll(self, now)
    local o = self.options
    if not self.window_end then
        self.window_end, self.epoch_end = now + o.interval_us, now + o.epoch_us
        return
    end
    while now >= self.epoch_end do
        local service = self.service
        service.noload_before, service.noload_now = service.noload_now, huge
        for name, route in pairs(self.routes) do
            route.noload_before, route.noload_now = route.noload_now, huge
            -- A route with no request for two epochs leaves its place to another.
            if name ~= UNNAMED and noload_of(route) == huge then
                self.routes[name] = nil
                self.named_routes = self.named_routes - 1
            end
        end
        self.epoch_end = self.epoch_end + o.epoch_us
    end
    if now < self.window_end then
        return
    end
    local bound = self.peak >= self.limit / 2
    -- The interval is read by the fastest route that finished a request in it (of those past
    -- their cold start, if any is): a queue delays every route's requests, and the fastest
    -- route's show the least of one; a route's fastest is set against its own target, so that an
    -- interval without a fast route's request (a health check's) is no queue.
    local judge = judging_route(self)
    local measured = judge ~= nil
    local fastest = measured and judge.window_min or huge
    local target = measured and target_of(self, noload_of(judge)) or huge
    -- While congested, a queue stands whatever the peak: the probe may raise the limit past it.
    local standing = measured and (bound or self.congested) and fastest > target
    -- While congested, a fastest request slower than every request of the peak ahead of it at
    -- the target each: no queue here explains it, the service itself got slower (a
    -- dependency). After `enter` such intervals the no-load latency is what it takes now.
    if standing and self.congested and fastest > max(1, self.peak) * target then
        self.unexplained = self.unexplained + 1
    else
        self.unexplained = 0
    end
    if self.unexplained >= o.enter then
        for _, latency in pairs(self.routes) do
            if latency.window_min < huge then
                latency.noload_now, latency.noload_before = latency.window_min, latency.window_min
            end
        end
        local service = self.service
        service.noload_now, service.noload_before = service.window_min, service.window_min
        self.unexplained = 0
        standing = false
    end
    self.standing_run = standing and self.standing_run + 1 or 0
    local before = self.limit
    local calm = false
    -- A queue that stands while the limit, not congested, is full is an overload already: a
    -- burst a healthy service holds neither fills it nor stands.
    local at_once = standing and (fastest > o.deep * target or self.full)
    if standing and (self.congested or at_once or self.standing_run >= o.enter) then
        local gradient = max(0.2, min(0.9, target / fastest))
        self.limit = max(o.floor, min(self.limit, self.peak) * gradient)
        if not self.congested then
            self.congestions = self.congestions + 1
        end
        self.congested = true
    elseif standing then -- luacheck: ignore 542
        -- Not yet: a queue must stand for `enter` intervals, be deep, or fill the limit.
    elseif bound and measured then
        if not self.congested then
            self.limit = min(o.ceiling, self.limit + sqrt(self.limit))
        elseif self.queued * 10 <= self.finished or self.trough == 0 then
            -- Congested, it grows by one, unless a queue came and went at this limit (over a
            -- tenth of the requests took longer than the target) while the service never went
            -- idle: the limit is what it can hold (a pool's size), and probing past it is a queue.
            self.limit = min(o.ceiling, self.limit + 1)
        end
    elseif not bound then
        if self.congested then
            -- Shedding keeps the queue short: what it refused is the overload going on. One
            -- calm interval is no end (an overload's arrivals come and go).
            if self.refused < self.admitted then
                calm = true
                if self.calm_run + 1 >= CALM_INTERVALS_TO_END then
                    self.congested = false
                end
            elseif self.refused - self.waited_out - self.by_level >= self.admitted then
                -- Refusing by the shares alone, under half the limit: room is probed for as
                -- headroom, so that a load the shares hold back cannot keep it (what a
                -- request's own wait refused is a queue, not the shares).
                self.limit = min(o.ceiling, self.limit + sqrt(self.limit))
            end
        else
            self.limit = max(o.floor, 2 * self.peak, self.limit * o.decay)
        end
    end
    if calm then
        self.calm_run = self.congested and self.calm_run + 1 or 0
    elseif self.admitted > 0 or self.refused > 0 then
        -- An interval that decided nothing neither continues a calm run nor breaks it.
        self.calm_run = 0
    end
    if self.limit ~= before then
        self.changes = self.changes + 1
    end
    close_interval(self.service)
    for _, route in pairs(self.routes) do
        close_interval(route)
    end
    self.peak = self.inflight
    self.trough = self.inflight + self.behind
    self.finished = 0
    self.queued = 0
    self.admitted = 0
    self.refused = 0
    self.waited_out = 0
    self.by_level = 0
    self.full = false
    self.window_end = now + o.interval_us
end

--- Whether a request of class `index` (1, critical_plus, to 4, sheddable) is admitted at
--- `now` (whole microseconds of a monotonic clock); an admitted one is in flight until `finish`.
--- `backlog` is how long the request waited before it could be decided (µs, 0 by default):
--- the work ahead of it, counted as that many no-load latencies' worth of requests in flight
--- (for every class but the top one), and, while congested, its own wait, refused past its
--- share of the target.
function _M.admit(self, index, now, backlog)
    roll(self, now)
    local noload = noload_of(self.service)
    local waiting = 0
    if backlog and backlog > 0 and noload < huge then
        waiting = backlog / noload
    end
    local load = self.inflight + waiting
    -- The backlog refuses only while congested: a burst's wait is no standing queue.
    -- The top class counts only what is in flight: the backlog is a guess of the queue, and
    -- its places are kept.
    local counted = index == 1 and self.inflight or load
    local admitted
    local waited_out = false
    if self.congested then
        local share = self.options.shares[index]
        admitted = counted < self.limit * share
        if admitted and index > 1 and waiting > 0 then
            waited_out = backlog >= self.options.sojourn * share * target_of(self, noload)
            admitted = not waited_out
        end
    else
        -- Not congested, the initial limit admits too: the limit eased down is what the
        -- standing-queue test reads, and a burst that a fresh worker admits, an idle one
        -- admits as well.
        admitted = self.inflight < max(self.limit, self.options.initial)
        self.full = self.full or not admitted
    end
    -- The peak is what the limit counted the request against: for the top class, what is in
    -- flight alone, so that a loop kept busy by the top class (a readiness probe's, a load
    -- test's), whose backlog is a guess, reads as no queue to cut.
    if admitted then
        self.inflight = self.inflight + 1
        self.admitted = self.admitted + 1
        self.peak = max(self.peak, counted + 1)
        return true
    end
    self.peak = max(self.peak, counted)
    self.refused = self.refused + 1
    if waited_out then
        self.waited_out = self.waited_out + 1
    end
    return false
end

-- `name`'s latencies, kept apart for the first ROUTES routes named.
local function route_of(self, name)
    local route = self.routes[name or UNNAMED]
    if not route then
        if self.named_routes >= ROUTES then
            return self.routes[UNNAMED]
        end
        route = latencies()
        self.routes[name] = route
        self.named_routes = self.named_routes + 1
    end
    return route
end

--- An admitted request of route `name` (its method and path; nil: unnamed) ended at `now` after
--- `latency`, leaving `backlog` of work waiting for the service where the package counts it (a run
--- queue's; nil here: whole microseconds all): the service is not idle while it waits.
function _M.finish(self, latency, now, name, backlog)
    roll(self, now)
    self.inflight = max(0, self.inflight - 1)
    local noload = noload_of(self.service)
    self.behind = 0
    if backlog and backlog > 0 and noload < huge then
        self.behind = backlog / noload
    end
    self.trough = min(self.trough, self.inflight + self.behind)
    finished_in(self.service, latency)
    local route = route_of(self, name)
    finished_in(route, latency)
    self.finished = self.finished + 1
    if latency > target_of(self, noload_of(route)) then
        self.queued = self.queued + 1
    end
end

--- A request the service's level refused at `now` before this limit decided it: one more refusal
--- of the interval, as shedding's own (the overload goes on while anything is refused: the level's
--- refusals keep congestion from ending when they leave this limit only a trickle to decide), never
--- in flight.
function _M.shed_by_level(self, now)
    roll(self, now)
    self.refused = self.refused + 1
    self.by_level = self.by_level + 1
end

--- An admitted request ended at `now` with an answer that says nothing of the service's latency
--- (the package's own: a refusal, a failure policy's answer while the server failed), or began to
--- wait on the rate-limit server (until `back`): it leaves the requests in flight, and no latency
--- is counted.
function _M.leave(self, now)
    roll(self, now)
    self.inflight = max(0, self.inflight - 1)
    self.trough = min(self.trough, self.inflight)
end

--- A request that left the requests in flight (`leave`) while it waited on the rate-limit server
--- got its answer, or gave up on it, at `now`: it is in flight again, whatever the limit (it was
--- admitted). A frozen server's timeout is not the service's concurrency: counted, a service whose
--- requests wait on it refuses its other routes.
function _M.back(self, now)
    roll(self, now)
    self.inflight = self.inflight + 1
    self.peak = max(self.peak, self.inflight)
end

return _M
