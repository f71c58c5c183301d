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
local bit = require "bit"

-- lua-resty-redis: `resty.redis` upstream, `nginx.redis` in Debian's lua-nginx-redis.
local found, redis = pcall(require, "resty.redis")
if not found then
    redis = require "nginx.redis"
end

local ngx = ngx
local ngx_now, tcp, null = ngx.now, ngx.socket.tcp, ngx.null
local band, bxor, lshift, rshift = bit.band, bit.bxor, bit.lshift, bit.rshift
local byte, find, sub, format = string.byte, string.find, string.sub, string.format
local concat, unpack = table.concat, unpack
local floor, max = math.floor, math.max
local tonumber, tostring, type, setmetatable = tonumber, tostring, type, setmetatable
local found_new_tab, new_tab = pcall(require, "table.new")
if not found_new_tab then
    new_tab = function() return {} end
end

local protocol = require "resty.ratelimit_module.protocol"

local _M = { _VERSION = "0.3.0" }
local mt = { __index = _M }

-- Redis Cluster's key hash: CRC16 (XMODEM) of the key, or of its {hash tag}, mod 16384.
local crc_table = {}
for i = 0, 255 do
    local crc = lshift(i, 8)
    for _ = 1, 8 do
        if band(crc, 0x8000) ~= 0 then
            crc = bxor(lshift(crc, 1), 0x1021)
        else
            crc = lshift(crc, 1)
        end
    end
    crc_table[i] = band(crc, 0xFFFF)
end

local function crc16(text)
    local crc = 0
    for i = 1, #text do
        crc = bxor(band(lshift(crc, 8), 0xFFFF), crc_table[bxor(rshift(crc, 8), byte(text, i))])
    end
    return crc
end

--- The hash slot of `key`.
function _M.slot(key)
    local open = find(key, "{", 1, true)
    if open then
        local close = find(key, "}", open + 1, true)
        if close and close > open + 1 then
            key = sub(key, open + 1, close - 1)
        end
    end
    return crc16(key) % 16384
end

-- Errors a server answers while it cannot serve: decided as a failure, like no answer.
local UNAVAILABLE = { LOADING = true, MASTERDOWN = true, CLUSTERDOWN = true, TRYAGAIN = true,
    BUSY = true }

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
    local deny_cache, metrics
    if opts.deny_cache then
        deny_cache = ngx.shared[opts.deny_cache]
        if not deny_cache then
            return nil, "deny_cache: shared dict not found"
        end
    end
    if opts.metrics then
        metrics = ngx.shared[opts.metrics]
        if not metrics then
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
        metrics = metrics,
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

--- Logs `message` at most once a second per worker (for a failing server, whose every
--- call would otherwise log).
function _M.log_error(self, message)
    local now = ngx.now()
    if now - self.logged_at >= 1 then
        self.logged_at = now
        ngx.log(ngx.ERR, "ratelimit_module: ", message)
    end
end

local function now_precise()
    ngx.update_time()
    return ngx_now()
end

-- RESP, the protocol, for the limiters' own calls: a command is one string, sent in one write
-- (a table of fragments costs the socket a C API call per fragment, more than the string
-- costs to build), and a reply is read with as few reads as it arrives in (usually one),
-- where lua-resty-redis reads each line of an array apart. What it returns is what
-- lua-resty-redis returns: a string, a number, ngx.null, a table, or false and the error text
-- for an error reply ({false, text} inside an array).

--- The RESP of `args` from `first` to `last` (the end, by default), each a bulk string
--- (numbers as tostring writes them), without the array's header.
local function encode_args(args, first, last)
    local n = last or #args
    local fragments = new_tab(2 * (n - first + 1), 0)
    local at = 0
    for i = first, n do
        local arg = args[i]
        if type(arg) ~= "string" then
            arg = tostring(arg)
        end
        fragments[at + 1] = "$" .. #arg .. "\r\n"
        fragments[at + 2] = arg .. "\r\n"
        at = at + 2
    end
    return concat(fragments)
end

--- The command `args` (strings and numbers; numbers as tostring writes them) as RESP.
local function encode(args)
    return "*" .. #args .. "\r\n" .. encode_args(args, 1)
end
_M.encode = encode
_M.encode_args = encode_args

--- A command whose arguments are all known but its key, the second: what `with_key` makes
--- a command of, at the cost of one concatenation. For a limiter's calls, made when its
--- parameters are set.
function _M.template(args)
    return { head = "*" .. #args .. "\r\n" .. encode_args({ args[1] }, 1),
        tail = encode_args(args, 3) }
end

--- The command of `template` (from `template`) for `key`: what `encode` gives of the same
--- arguments.
function _M.with_key(template, key)
    return template.head .. "$" .. #key .. "\r\n" .. key .. "\r\n" .. template.tail
end

--- `limiter:command(key, commit)` encoded, from the two templates the limiter keeps in its
--- `templates` (made on first use; a limiter clears them when its parameters change). A
--- limiter's `encoded` method.
function _M.encoded(limiter, key, commit)
    local templates = limiter.templates
    if not templates then
        templates = { [true] = _M.template(limiter:command("", true)),
            [false] = _M.template(limiter:command("", false)) }
        limiter.templates = templates
    end
    return _M.with_key(templates[commit and true or false], key)
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
    if reply[1] ~= 0 then
        return 0, reply[4] >= 0 and reply[4] / 1e6 or nil
    end
    if delayed then
        return delayed, nil, nil, reply[6] / 1e6
    end
    return reply[6], nil, nil, 0
end

-- Parses one reply from `buf` at `pos`: the value and the position after it, or nil when
-- `buf` does not hold all of it yet. An error reply is false and its text.
local function parse(buf, pos)
    local eol = find(buf, "\r\n", pos, true)
    if not eol then
        return nil
    end
    local prefix = byte(buf, pos)
    if prefix == 58 then -- ':'
        return tonumber(sub(buf, pos + 1, eol - 1)), eol + 2
    elseif prefix == 42 then -- '*'
        local n = tonumber(sub(buf, pos + 1, eol - 1))
        if not n or n < 0 then
            return null, eol + 2
        end
        local vals = new_tab(n, 0)
        local at = eol + 2
        for i = 1, n do
            local value, next_at, err = parse(buf, at)
            if next_at == nil then
                return nil, nil, err
            end
            vals[i] = value == false and { false, err } or value
            at = next_at
        end
        return vals, at
    elseif prefix == 36 then -- '$'
        local len = tonumber(sub(buf, pos + 1, eol - 1))
        if not len or len < 0 then
            return null, eol + 2
        end
        local last = eol + 1 + len
        if #buf < last + 2 then
            return nil
        end
        return sub(buf, eol + 2, last), last + 3
    elseif prefix == 43 then -- '+'
        return sub(buf, pos + 1, eol - 1), eol + 2
    elseif prefix == 45 then -- '-'
        return false, eol + 2, sub(buf, pos + 1, eol - 1)
    end
    return nil, nil, "bad reply"
end
_M.parse = parse

-- Reads one reply from `sock`: the value, or nil and the error when the socket failed
-- (then not reusable), or false and the text of an error reply.
local function read_reply(sock)
    local buf, err = sock:receiveany(4096)
    if not buf then
        return nil, err
    end
    while true do
        local value, after, text = parse(buf, 1)
        if after then
            if after <= #buf then
                return nil, "more than one reply"
            end
            if value == false then
                return false, text
            end
            return value
        elseif text then
            return nil, text
        end
        local more
        more, err = sock:receiveany(65536)
        if not more then
            return nil, err
        end
        buf = buf .. more
    end
end

-- Sends `args` (a list, or a command already encoded) on `sock` and reads the reply, as
-- read_reply returns it.
local function command(sock, args)
    local ok, err = sock:send(type(args) == "string" and args or encode(args))
    if not ok then
        return nil, err
    end
    return read_reply(sock)
end
_M.read_reply = read_reply

-- The pool options of `host:port`: one pool per node, database and password, so that a
-- pooled connection is already set up.
local function pool_options(self, host, port)
    local node = host .. ":" .. port
    local options = self.pools[node]
    if not options then
        local pool = format("ratelimit_module:%s:%d:%s", node, self.db,
            self.password and ngx.crc32_long(self.password) or "")
        options = { pool = pool, pool_size = self.pool_size }
        self.pools[node] = options
    end
    return options
end

-- Connects a raw socket to `host:port` within `timeout` ms: a pooled connection, or a new
-- one, authenticated and on its database (its setup within what is left of `deadline`, read
-- only then: a reused connection costs no clock read).
local function connect_socket(self, host, port, timeout, deadline)
    local sock = tcp()
    sock:settimeout(timeout)
    -- The server's pool options, kept apart: a call to it builds no node name.
    local options
    if host == self.host and port == self.port then
        options = self.main_pool
        if not options then
            options = pool_options(self, host, port)
            self.main_pool = options
        end
    else
        options = pool_options(self, host, port)
    end
    local ok, err = sock:connect(host, port, options)
    if not ok then
        return nil, err
    end
    if (self.password or self.db ~= 0) and sock:getreusedtimes() == 0 then
        local res
        if self.password then
            res, err = command(sock, { "auth", self.password })
            if not res then
                sock:close()
                return nil, "AUTH: " .. tostring(err)
            end
        end
        if self.db ~= 0 then
            res, err = command(sock, { "select", self.db })
            if not res then
                sock:close()
                return nil, "SELECT: " .. tostring(err)
            end
        end
        sock:settimeout(max(1, floor((deadline - now_precise()) * 1000)))
    end
    return sock
end

-- Connects to `host:port` within what is left until `deadline`: a pooled connection, or a
-- new one, authenticated and on its database (lua-resty-redis, for the transactions and the
-- slot map).
local function connect(self, host, port, deadline)
    local red, err = redis:new()
    if not red then
        return nil, err
    end
    red:set_timeout(max(1, floor((deadline - now_precise()) * 1000)))
    local ok
    ok, err = red:connect(host, port, pool_options(self, host, port))
    if not ok then
        return nil, err
    end
    if red:get_reused_times() == 0 then
        if self.password then
            ok, err = red:auth(self.password)
            if not ok then
                red:close()
                return nil, "AUTH: " .. tostring(err)
            end
        end
        if self.db ~= 0 then
            ok, err = red:select(self.db)
            if not ok then
                red:close()
                return nil, "SELECT: " .. tostring(err)
            end
        end
        -- What the new connection's setup left of the deadline.
        red:set_timeout(max(1, floor((deadline - now_precise()) * 1000)))
    end
    return red
end

local function split_node(node)
    local colon = find(node, ":[^:]*$")
    return sub(node, 1, colon - 1), tonumber(sub(node, colon + 1))
end

-- Reads the slot map of the Cluster from its seed nodes (the first that answers).
local function load_slots(self, deadline)
    local last_err = "no seed node"
    for _, seed in ipairs(self.cluster) do
        local host, port = split_node(seed)
        local red, err = connect(self, host, port, deadline)
        if red then
            local ranges
            ranges, err = red:cluster("slots")
            if type(ranges) == "table" then
                red:set_keepalive(self.keepalive, self.pool_size)
                local slots = {}
                for _, range in ipairs(ranges) do
                    local master = range[3]
                    local node = master[1] .. ":" .. master[2]
                    for slot = range[1], range[2] do
                        slots[slot] = node
                    end
                end
                self.slots = slots
                return true
            end
            red:close()
        end
        last_err = seed .. ": " .. tostring(err)
    end
    return nil, last_err
end

-- Where the command for `key` goes.
local function node_for(self, key, deadline)
    if not self.cluster then
        return self.host, self.port
    end
    if not self.slots or self.reload then
        self.reload = false
        local ok, err = load_slots(self, deadline)
        if not ok and not self.slots then
            return nil, err
        end
    end
    local node = self.slots[_M.slot(key)]
    if not node then
        return nil, "no node serves the slot of " .. key
    end
    return split_node(node)
end

-- Sends `args` (the command, then its arguments) on a connection to host:port, after ASKING
-- when `asking`, within `timeout` ms (`deadline` bounds a new connection's setup). The reply,
-- or nil and the error; `failed` when the server did not answer.
local function send(self, host, port, args, asking, timeout, deadline)
    local sock, err = connect_socket(self, host, port, timeout, deadline)
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
    if self.open_until > 0 then
        -- Open, or half-open with a probe out: decided without asking. Otherwise this call
        -- is the probe, and the worker's other requests wait for its answer until then.
        if now < self.open_until or now < self.probe_until then
            return nil, "the server failed less than a cool-down ago", true
        end
        self.probe_until = now + self.cooldown
    end
    local start = self.metrics and now_precise()
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
        local kind, slot, node = string.match(err or "", "^(%u+) (%d+) (%S+)$")
        if kind == "MOVED" and self.slots then
            -- The slot moved for good: its new node at once, the whole map before the next
            -- call.
            self.slots[tonumber(slot)] = node
            self.reload = true
            host, port = split_node(node)
            asking = false
        elseif kind == "ASK" then
            host, port = split_node(node)
            asking = true
        else
            local code = string.match(err or "", "^(%u+)")
            failed = UNAVAILABLE[code] or false
            break
        end
    end
    if start then
        self:observe(now_precise() - start)
    end
    if failed then
        self.open_until = now_precise() + self.cooldown
        self:log_error(format("%s:%s: %s", tostring(host or self.host), tostring(port or self.port),
            tostring(err)))
    elseif self.open_until > 0 then
        -- The probe's answer: the circuit closes.
        self.open_until, self.probe_until = 0, 0
    end
    return res, err, failed
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
    local red, err = connect(self, host, port, deadline)
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

--- The seconds a refusal cached under `id` still stands, if it does (`id` is nil without a
--- deny cache: the limiters make it only when there is one).
function _M.denied(self, id)
    local cache = self.deny_cache
    if not cache or not id then
        return nil
    end
    local until_at = cache:get(id)
    if not until_at then
        return nil
    end
    local left = until_at - ngx.now()
    return left > 0 and left or nil
end

--- Caches a refusal under `id` for `seconds`: later calls are refused without asking.
function _M.deny(self, id, seconds)
    local cache = self.deny_cache
    if cache and id and seconds and seconds > 0 then
        cache:set(id, ngx.now() + seconds, seconds)
    end
end

-- Latency buckets of the server call, in seconds (Prometheus' `le`).
_M.BUCKETS = { 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1 }

--- Counts a server call of `seconds` in the latency histogram.
function _M.observe(self, seconds)
    local metrics = self.metrics
    if not metrics then
        return
    end
    for _, le in ipairs(_M.BUCKETS) do
        if seconds <= le then
            metrics:incr("latency_bucket|" .. le, 1, 0)
        end
    end
    metrics:incr("latency_bucket|+Inf", 1, 0)
    metrics:incr("latency_count", 1, 0)
    metrics:incr("latency_sum_us", floor(seconds * 1e6 + 0.5), 0)
end

--- Counts one decision of `policy` with `outcome` (allowed, refused, delayed, failed_open,
--- failed_closed, deny_cache, shadow).
function _M.count(self, policy, outcome)
    local metrics = self.metrics
    if metrics then
        metrics:incr("decisions|" .. policy .. "|" .. outcome, 1, 0)
    end
end

--- What a call that the server failed decides, for `policy`: true to admit, false to refuse,
--- nil to return the error (`on_error` unset).
function _M.on_failure(self, policy)
    if self.on_error == "allow" then
        self:count(policy, "failed_open")
        return true
    elseif self.on_error == "deny" then
        self:count(policy, "failed_closed")
        return false
    end
    return nil
end

--- A refusal, as shadow mode decides it: true when the request goes through anyway (counted
--- as `shadow`, and logged), false when it is refused (counted as `refused`).
function _M.refused(self, policy, key)
    if self.shadow then
        self:count(policy, "shadow")
        ngx.log(ngx.WARN, "ratelimit_module: shadow: ", policy, " would refuse ", key)
        return true
    end
    self:count(policy, "refused")
    return false
end

return _M
