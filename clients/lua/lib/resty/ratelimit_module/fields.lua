-- The HTTP fields of the decisions a request went through: the IETF `RateLimit-Policy` and
-- `RateLimit` fields (draft-ietf-httpapi-ratelimit-headers-11) and `Retry-After` on a
-- refusal, as the Python and Node packages set them:
--
--   RateLimit-Policy: "api";q=10;w=1, "conn";q=100;w=60
--   RateLimit: "api";r=3;t=1, "conn";r=97;t=60
--
-- Every limiter of this package notes its decision in the request's context; call `set()`
-- before the response goes out (in access_by_lua*, before ngx.exit).
local specs = require "resty.ratelimit_module.specs"

local ngx = ngx
local ceil, max, floor = math.ceil, math.max, math.floor
local ipairs = ipairs
local concat, format = table.concat, string.format

local _M = { _VERSION = "0.3.0" }

--- Whole seconds, rounded up: a client that waits this long is never early.
local function seconds(value)
    return max(0, ceil(value - 1e-9))
end
_M.seconds = seconds

-- The decisions noted in this request: pairs of a limiter and its reply, whose fields are
-- computed only if the headers are asked for (`limiter:fields(reply)`, which reads it with
-- protocol.decision), or of false and the fields themselves.
local function noted_list()
    local ctx = ngx.ctx
    local noted = ctx.ratelimit_module_fields
    if not noted then
        noted = {}
        ctx.ratelimit_module_fields = noted
    end
    return noted
end

local function record(name, q, w, r, t, refused, retry)
    return { name = name, q = floor(q), w = seconds(w), r = max(0, floor(r)), t = seconds(t),
        refused = refused, retry = retry }
end

--- Notes a decision of the policy `name`: a quota of `q` per `w` seconds, `r` remaining,
--- full again in `t` seconds, and, when refused, the seconds until it would be admitted
--- (`retry`, nil when it never would).
function _M.note(name, q, w, r, t, refused, retry)
    local noted = noted_list()
    local n = #noted
    noted[n + 1] = false
    noted[n + 2] = record(name, q, w, r, t, refused, retry)
end

--- Notes that `limiter` decided `reply`: what `note` would note of `limiter:fields(reply)`,
--- computed when the headers are asked for, so that a request whose fields nobody sets
--- pays only for the note.
function _M.defer(limiter, reply)
    local noted = noted_list()
    local n = #noted
    noted[n + 1] = limiter
    noted[n + 2] = reply
end

-- The policy's name of a limiter spec that names none, as the other packages name it.
local NAMES = { throttle = "burst", window = "window", log = "log", lease = "slots" }

--- Notes `result`, specs.result's of a call built by specs.command from `limiters`
--- (specs): one policy per rate limiter (a load gate has none), named by its `name`.
function _M.note_result(result, limiters)
    local each, i = result.each, 0
    for _, spec in ipairs(limiters) do
        if spec.kind ~= "load" then
            i = i + 1
            local one = each[i] or result
            _M.note(spec.name or NAMES[spec.kind], one.limit, specs.window_seconds(spec),
                one.remaining, one.reset_after, not result.allowed, result.retry_after)
        end
    end
end

--- The fields for the decisions noted so far in this request: a table of header names to
--- values (empty when nothing was noted).
function _M.headers()
    local noted = ngx.ctx.ratelimit_module_fields
    local fields = {}
    if not noted or #noted == 0 then
        return fields
    end
    local policies, states, retry = {}, {}, nil
    for i = 1, #noted, 2 do
        local limiter, one = noted[i], noted[i + 1]
        if limiter then
            one = record(limiter:fields(one))
        end
        policies[#policies + 1] = format('"%s";q=%d;w=%d', one.name, one.q, one.w)
        states[#states + 1] = format('"%s";r=%d;t=%d', one.name, one.r, one.t)
        if one.refused and one.retry then
            retry = max(retry or 0, one.retry)
        end
    end
    fields["RateLimit-Policy"] = concat(policies, ", ")
    fields["RateLimit"] = concat(states, ", ")
    if retry then
        fields["Retry-After"] = tostring(seconds(retry))
    end
    return fields
end

--- Sets the fields on the response.
function _M.set()
    for name, value in pairs(_M.headers()) do
        ngx.header[name] = value
    end
end

return _M
