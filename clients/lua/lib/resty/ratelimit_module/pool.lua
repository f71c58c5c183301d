-- The connections of a client: one pool per node, database and password, so that a pooled
-- connection is already set up; raw cosockets for the limiters' calls, and lua-resty-redis
-- (as `resty.redis`, or Debian's `nginx.redis`) for transactions and the slot map.
local resp = require "resty.ratelimit_module.resp"

local found, redis = pcall(require, "resty.redis")
if not found then
    redis = require "nginx.redis"
end

local ngx = ngx
local ngx_now, tcp = ngx.now, ngx.socket.tcp
local format, tostring = string.format, tostring
local floor, max = math.floor, math.max
local command = resp.command

local _M = { _VERSION = "0.3.0" }

--- The clock, updated first: for what must not read an event loop's turn early.
local function now_precise()
    ngx.update_time()
    return ngx_now()
end
_M.now_precise = now_precise

-- The pool options of `host:port` for `client`.
local function pool_options(client, host, port)
    local node = host .. ":" .. port
    local options = client.pools[node]
    if not options then
        local pool = format("ratelimit_module:%s:%d:%s", node, client.db,
            client.password and ngx.crc32_long(client.password) or "")
        options = { pool = pool, pool_size = client.pool_size }
        client.pools[node] = options
    end
    return options
end

--- Connects a raw socket of `client` to `host:port` within `timeout` ms: a pooled
--- connection, or a new one, authenticated and on its database (its setup within what is
--- left of `deadline`, read only then: a reused connection costs no clock read).
function _M.socket(client, host, port, timeout, deadline)
    local sock = tcp()
    sock:settimeout(timeout)
    -- The server's pool options, kept apart: a call to it builds no node name.
    local options
    if host == client.host and port == client.port then
        options = client.main_pool
        if not options then
            options = pool_options(client, host, port)
            client.main_pool = options
        end
    else
        options = pool_options(client, host, port)
    end
    local ok, err = sock:connect(host, port, options)
    if not ok then
        return nil, err
    end
    if (client.password or client.db ~= 0) and sock:getreusedtimes() == 0 then
        local res
        if client.password then
            res, err = command(sock, { "auth", client.password })
            if not res then
                sock:close()
                return nil, "AUTH: " .. tostring(err)
            end
        end
        if client.db ~= 0 then
            res, err = command(sock, { "select", client.db })
            if not res then
                sock:close()
                return nil, "SELECT: " .. tostring(err)
            end
        end
        sock:settimeout(max(1, floor((deadline - now_precise()) * 1000)))
    end
    return sock
end

--- Connects `client` to `host:port` with lua-resty-redis within what is left until
--- `deadline`: a pooled connection, or a new one, authenticated and on its database.
function _M.redis(client, host, port, deadline)
    local red, err = redis:new()
    if not red then
        return nil, err
    end
    red:set_timeout(max(1, floor((deadline - now_precise()) * 1000)))
    local ok
    ok, err = red:connect(host, port, pool_options(client, host, port))
    if not ok then
        return nil, err
    end
    if red:get_reused_times() == 0 then
        if client.password then
            ok, err = red:auth(client.password)
            if not ok then
                red:close()
                return nil, "AUTH: " .. tostring(err)
            end
        end
        if client.db ~= 0 then
            ok, err = red:select(client.db)
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

return _M
