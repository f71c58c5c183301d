-- The connection every limiter of this package shares: one Redis command per decision, on
-- a pooled cosocket (lua-resty-redis, as `resty.redis` or Debian's `nginx.redis`), bounded
-- by `timeout`, routed by hash slot on a Redis Cluster (MOVED and ASK followed), with a
-- failure policy, a short circuit after a failure, a deny cache, metrics and shadow mode.
--
-- The options (the table a limiter's `new` takes first):
--
--   host, port            the server (127.0.0.1, 6379)
--   password, db          AUTH and SELECT on each new connection
--   timeout               the most a call may take, in ms, connecting included (1000)
--   pool_size, keepalive  the connection pool: its size per worker, and idle ms (100, 60000)
--   cluster               a list of seed nodes, "host:port", for a Redis Cluster
--   on_error              "allow" | "deny": what a call decides when the server cannot be
--                         reached or does not answer in time; unset, the limiter returns
--                         nil and the error
--   cooldown              ms during which a worker does not ask a server that just failed
--                         (1000): the calls meanwhile go by on_error at once; then one
--                         call probes the server while the others still do, until its
--                         answer closes the circuit or its failure opens it again
--   deny_cache            a lua_shared_dict's name: a refusal is answered from it, without
--                         asking the server, until its retry_after has passed
--   metrics               a lua_shared_dict's name: decisions and call latencies counted there
--                         for resty.ratelimit_module.metrics to serve
--   shadow                true: decide and count as usual, but let refused requests through
--                         (marked in the metrics and in the log)
--   name                  the policy's name in metrics and HTTP fields (the limiter's kind)
--   fields                false: note no decision for the HTTP fields (resty.ratelimit_module
--                         .fields), for a gateway that never sets them (true)
--   lease                 conn only: how long a connection's slot is held at most, in s (60)
--   prefix                put before every key this limiter is given (""): what the original's
--                         shared dict was, a namespace, for limiters called with one key
-- The client composes one concern per file: `resp` (the RESP codec), `pool` (connections),
-- `slot` and `cluster` (routing on a Cluster), `circuit` (the failure policy and circuit),
-- `deny` (the deny cache) and `metrics` (the counters); here, the registry of clients and
-- the call.
local circuit = require "resty.ratelimit_module.circuit"
local cluster = require "resty.ratelimit_module.cluster"
local deny = require "resty.ratelimit_module.deny"
local metrics = require "resty.ratelimit_module.metrics"
local pool = require "resty.ratelimit_module.pool"
local protocol = require "resty.ratelimit_module.protocol"
local resp = require "resty.ratelimit_module.resp"
local slot = require "resty.ratelimit_module.slot"

local ngx = ngx
local ngx_now = ngx.now
local concat, unpack = table.concat, unpack
local floor, max = math.floor, math.max
local match = string.match
local ipairs, tostring, type, setmetatable = ipairs, tostring, type, setmetatable
local command, now_precise, node_for = resp.command, pool.now_precise, cluster.node_for

local _M = { _VERSION = "0.3.0" }
local mt = { __index = _M }

-- What the other files give, under the names the limiters and the tests use.
_M.slot = slot.slot
_M.encode, _M.encode_args, _M.template = resp.encode, resp.encode_args, resp.template
_M.with_key, _M.encoded, _M.parse, _M.read_reply = resp.with_key, resp.encoded, resp.parse,
    resp.read_reply
_M.BUCKETS, _M.observe, _M.count = metrics.BUCKETS, metrics.observe, metrics.count
_M.log_error, _M.on_failure = circuit.log_error, circuit.on_failure

-- One client per distinct set of connection options, per worker: the limiters of one
-- configuration share its slot map and its circuit.
local clients = {}

local function signature(opts)
    local seeds = opts.cluster and concat(opts.cluster, ",") or
        ((opts.host or "127.0.0.1") .. ":" .. (opts.port or 6379))
    return concat({ seeds, tostring(opts.db or 0), opts.password or "",
        tostring(opts.timeout or 1000), tostring(opts.on_error), opts.deny_cache or "",
        opts.metrics or "", tostring(opts.shadow), tostring(opts.fields) }, "|")
end

--- The client for `opts`, made on first use in this worker.
function _M.get(opts)
    if type(opts) ~= "table" then
        return nil, "the first argument is a table of Redis options"
    end
    if opts.prefix ~= nil and type(opts.prefix) ~= "string" then
        return nil, "prefix is a string or unset"
    end
    if opts.on_error ~= nil and opts.on_error ~= "allow" and opts.on_error ~= "deny" then
        return nil, 'on_error is "allow", "deny" or unset'
    end
    local key = signature(opts)
    local client = clients[key]
    if client then
        return client
    end
    local deny_cache, counters
    if opts.deny_cache then
        deny_cache = ngx.shared[opts.deny_cache]
        if not deny_cache then
            return nil, "deny_cache: shared dict not found"
        end
    end
    if opts.metrics then
        counters = ngx.shared[opts.metrics]
        if not counters then
            return nil, "metrics: shared dict not found"
        end
    end
    client = setmetatable({
        host = opts.host or "127.0.0.1",
        port = opts.port or 6379,
        password = opts.password,
        db = opts.db or 0,
        timeout = opts.timeout or 1000,
        pool_size = opts.pool_size or 100,
        keepalive = opts.keepalive or 60000,
        cluster = opts.cluster,
        on_error = opts.on_error,
        cooldown = (opts.cooldown or 1000) / 1000,
        deny_cache = deny_cache,
        metrics = counters,
        shadow = opts.shadow and true or false,
        fields = opts.fields ~= false,
        pools = {},        -- "host:port" -> the options of its connection pool
        slots = nil,       -- slot -> "host:port", on a Cluster
        reload = false,    -- read the slot map again before the next call (a slot moved)
        open_until = 0,    -- the circuit: no call to the server before then (0: closed)
        probe_until = 0,   -- half-open: a call probes the server until then
        logged_at = 0,     -- when an error was last logged
    }, mt)
    clients[key] = client
    return client
end

-- The lease commands every limiter sends through the client (resty.ratelimit_module.protocol).
_M.release_args = protocol.release
_M.renew_args = protocol.renew

--- Sends `args`, a take with `AT_MOST`, or with `DELAY` of `delayed` units (in µs), for
--- `key`: the units granted, and when none, the seconds until what was asked fits (nil when
--- it never will); then, with `DELAY`, nil, nil and the seconds to wait before spending them.
--- Or nil, the error, and whether the server failed. A limiter's `lease` for
--- resty.ratelimit_module.quota.
function _M.lease(self, key, args, delayed)
    local reply, err, failed = self:call(key, args)
    if not reply then
        return nil, err, failed
    end
    local allowed, _, _, retry_after = protocol.decision(reply, "US")
    if not allowed then
        return 0, retry_after
    end
    if delayed then
        return delayed, nil, nil, protocol.sixth(reply) / 1e6
    end
    return protocol.sixth(reply), nil, nil, 0
end

-- Sends `args` (the command, then its arguments) on a connection to host:port, after ASKING
-- when `asking`, within `timeout` ms (`deadline` bounds a new connection's setup). The reply,
-- or nil and the error; `failed` when the server did not answer.
local function send(self, host, port, args, asking, timeout, deadline)
    local sock, err = pool.socket(self, host, port, timeout, deadline)
    if not sock then
        return nil, err, true
    end
    local res
    if asking then
        res, err = command(sock, { "asking" })
        if not res then
            sock:close()
            return nil, err, res == nil
        end
    end
    res, err = command(sock, args)
    if res == nil then
        -- No answer (a timeout, a closed connection): the connection is not reused.
        sock:close()
        return nil, err, true
    end
    sock:setkeepalive(self.keepalive, self.pool_size)
    if res == false then
        return nil, err, false
    end
    return res
end

--- Sends the command `args` (its name first, lower case; or the command encoded, by
--- `encode` or `with_key`) for `key`: its reply, or nil, the
--- error, and whether the server failed (could not be reached, did not answer in time, or
--- cannot serve), which the limiter then decides by `on_error`. Within the circuit's
--- cool-down after a failure, fails at once without asking. The clock is read only with
--- metrics (the call's latency), on a new connection, or when a Cluster redirects the call.
function _M.call(self, key, args)
    local now = ngx_now()
    if not circuit.admits(self, now) then
        return nil, "the server failed less than a cool-down ago", true
    end
    local start = self.metrics and now_precise()
    local waiting = circuit.waiting
    if waiting then
        waiting(true)
    end
    local timeout = self.timeout
    -- From the cached clock when nothing read it: at most an event loop's turn early, which
    -- only shortens the bound of a new connection's setup or a redirected call.
    local deadline = (start or now) + timeout / 1000
    local host, port, asking = nil, nil, false
    local res, err, failed
    for attempt = 1, 5 do
        if not host then
            host, port = node_for(self, key, deadline)
            if not host then
                res, err, failed = nil, port, true
                break
            end
        end
        if attempt > 1 then
            timeout = max(1, floor((deadline - now_precise()) * 1000))
        end
        res, err, failed = send(self, host, port, args, asking, timeout, deadline)
        if res ~= nil or failed then
            break
        end
        local kind, node = cluster.redirect(self, err)
        if not kind then
            failed = circuit.UNAVAILABLE[match(err or "", "^(%u+)")] or false
            break
        end
        host, port = cluster.split_node(node)
        asking = kind == "ASK"
    end
    if waiting then
        waiting(false)
    end
    if start then
        metrics.observe(self, now_precise() - start)
    end
    circuit.ended(self, failed, host, port, err)
    return res, err, failed
end

--- One decision, as every limiter makes it: a refusal the deny cache holds under `id` (nil:
--- none) is answered from it (`cached(limiter, seconds)`, if given, is told how long it
--- stands: a function, not a closure, so that a call makes no garbage); else `args` is sent
--- for `key` (a function is called first, `args(limiter, key, commit)`, so that a refusal
--- from the cache builds no command), and a refusal is cached under `id`. How the request
--- goes, and
--- the reply when the server gave one:
---   "allowed", reply       admitted by the server
---   "shadow", reply | nil  refused, by the server or the deny cache, and let through by
---                          shadow mode
---   "on_error"             the server failed, and on_error = "allow" lets it through
---   "rejected", reply | nil refused (by the server, the deny cache, or on_error = "deny")
---   nil, err               the server failed, and on_error is unset
function _M.decide(self, name, key, id, args, cached, limiter, commit)
    local denied = id and deny.denied(self, id)
    if denied then
        metrics.count(self, name, "deny_cache")
        if cached then
            cached(limiter, denied)
        end
        return self.shadow and "shadow" or "rejected"
    end
    if type(args) == "function" then
        args = args(limiter, key, commit)
    end
    local reply, err, failed = _M.call(self, key, args)
    if not reply then
        -- The server failed: the policy decides. An error it answered (WRONGTYPE...) is
        -- the caller's.
        if failed then
            local admit = circuit.on_failure(self, name)
            if admit then
                return "on_error"
            elseif admit == false then
                return "rejected"
            end
        end
        return nil, err
    end
    local allowed, _, _, retry_after = protocol.decision(reply, "US")
    if allowed then
        return "allowed", reply
    end
    deny.deny(self, id, retry_after)
    return circuit.refused(self, name, key) and "shadow" or "rejected", reply
end

--- Sends `commands` (each a list: the name first, lower case) for `key` in one transaction
--- (MULTI ... EXEC), in one round trip: the replies of the commands, or nil and the error.
--- For the writes of shared lists; not routed again on MOVED.
function _M.transaction(self, key, commands)
    local deadline = now_precise() + self.timeout / 1000
    local host, port = node_for(self, key, deadline)
    if not host then
        return nil, port
    end
    local red, err = pool.redis(self, host, port, deadline)
    if not red then
        return nil, err
    end
    red:init_pipeline(#commands + 2)
    red:multi()
    for _, args in ipairs(commands) do
        red[args[1]](red, unpack(args, 2))
    end
    red:exec()
    local results
    results, err = red:commit_pipeline()
    if not results then
        red:close()
        return nil, err
    end
    red:set_keepalive(self.keepalive, self.pool_size)
    local replies = results[#results]
    if type(replies) ~= "table" or replies[1] == false then
        return nil, type(replies) == "table" and replies[2] or "the transaction was aborted"
    end
    return replies
end

return _M
