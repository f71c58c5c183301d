-- The access-layer gateway of the articles (seed 001's lua-ngx-ratelimiter), rebuilt on the
-- redis-ratelimit module: per-caller, per-API limits with a default, an allow list of callers
-- that are never limited, a deny list of keys that are always refused, JSON error bodies.
-- The lists and the thresholds live in one Redis hash that every gateway instance reads
-- (resty.ratelimit_module.lists), not in Lua files:
--
--   api:<uri>              a limited API
--   allow:<caller>         a caller never limited
--   deny:<key>             a key always refused (keys are ratelimiter:<uri>:<caller>)
--   limit:<caller>:<uri>   "capacity fill_count interval_us": a token bucket of capacity
--                          requests, refilled fill_count every interval_us microseconds
--   limit:default          the same, for every other caller of a limited API
local cjson = require "cjson.safe"
local lists = require "resty.ratelimit_module.lists"
local req = require "resty.ratelimit_module.req"

local ngx = ngx

local _M = {}

-- The request's arguments: the query string, and a JSON body's fields.
local function arguments()
    local args = ngx.req.get_uri_args()
    if ngx.req.get_method() == "POST" then
        ngx.req.read_body()
        local body = cjson.decode(ngx.req.get_body_data() or "")
        if type(body) == "table" then
            for name, value in pairs(body) do
                args[name] = value
            end
        end
    end
    return args
end

-- Answers `status` with the JSON body the articles' gateway answers, and stops.
local function refuse(status, args, message)
    ngx.status = status
    ngx.header["Content-Type"] = "application/json"
    ngx.say(cjson.encode({ seqId = args.seqId, code = status, msg = message }))
    return ngx.exit(status)
end

-- Limiters by threshold, made once per worker (a token bucket of `capacity` refilled
-- `fill` per `interval_us` is limit_req's bucket with a queue of capacity - 1, each request
-- admitted at once: nodelay).
local limiters = {}

local function limiter(redis, threshold)
    local lim = limiters[threshold]
    if not lim then
        local capacity, fill, interval = string.match(threshold, "^(%d+) (%d+) (%d+)$")
        if not capacity then
            return nil, "a threshold is \"capacity fill_count interval_us\": " .. threshold
        end
        local rate = tonumber(fill) * 1e6 / tonumber(interval)
        lim = assert(req.new(redis, rate, tonumber(capacity) - 1))
        limiters[threshold] = lim
    end
    return lim
end

--- The access phase: refuses what the lists and limits refuse.
function _M.access(redis, hash)
    local args = arguments()
    local api, caller = ngx.var.uri, args.caller or ""
    if caller == "" then
        return refuse(ngx.HTTP_FORBIDDEN, args, "the caller argument is missing")
    end
    local key = "ratelimiter:" .. api .. ":" .. caller
    local config = lists.get(hash)
    if config.deny[key] then
        return refuse(ngx.HTTP_FORBIDDEN, args, "the key is on the deny list")
    end
    if config.allow[caller] or not config.api[api] then
        return
    end
    local threshold = config.limit[caller .. ":" .. api] or config.limit.default
    if not threshold then
        return
    end
    local lim, err = limiter(redis, threshold)
    if not lim then
        ngx.log(ngx.ERR, err)
        return
    end
    local delay
    delay, err = lim:incoming(key, true)
    if not delay then
        if err == "rejected" then
            return refuse(ngx.HTTP_TOO_MANY_REQUESTS, args, "too many requests")
        end
        ngx.log(ngx.ERR, "ratelimit: ", err)
    end
end

return _M
