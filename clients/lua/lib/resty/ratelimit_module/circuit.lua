-- The failure policy of a client: what a call decides when the server failed (`on_error`),
-- and the circuit that spares a failing server: for `cooldown` after a failure, calls fail at
-- once without asking; then one call probes the server while the others still fail at once,
-- until its answer closes the circuit or its failure opens it again. A failure is logged at
-- most once a second per worker.
local metrics = require "resty.ratelimit_module.metrics"
local pool = require "resty.ratelimit_module.pool"

local ngx = ngx
local format, tostring = string.format, tostring
local count = metrics.count
local now_precise = pool.now_precise

local _M = { _VERSION = "0.3.0" }

--- What this worker's load shedder (`load.start`) does as a request begins (true) and ends
--- (false) a wait on the server: the request leaves the worker's requests in flight meanwhile
--- (a frozen server's timeout is not the upstream's concurrency). nil without a shedder.
_M.waiting = nil

-- Errors a server answers while it cannot serve: decided as a failure, like no answer.
_M.UNAVAILABLE = { LOADING = true, MASTERDOWN = true, CLUSTERDOWN = true, TRYAGAIN = true,
    BUSY = true }

--- Whether `client` may ask the server at `now`: false while the circuit is open, or
--- half-open with a probe out; otherwise this call is the probe, when the circuit was open,
--- and the worker's other requests wait for its answer until a cool-down passes.
function _M.admits(client, now)
    if client.open_until > 0 then
        if now < client.open_until or now < client.probe_until then
            return false
        end
        client.probe_until = now + client.cooldown
    end
    return true
end

--- What a call of `client` to `host:port` ended with: `failed` opens the circuit (and logs
--- `err`); an answer closes it.
function _M.ended(client, failed, host, port, err)
    if failed then
        client.open_until = now_precise() + client.cooldown
        _M.log_error(client, format("%s:%s: %s", tostring(host or client.host),
            tostring(port or client.port), tostring(err)))
    elseif client.open_until > 0 then
        -- The probe's answer: the circuit closes.
        client.open_until, client.probe_until = 0, 0
    end
end

--- Logs `message` at most once a second per worker (for a failing server, whose every
--- call would otherwise log).
function _M.log_error(client, message)
    local now = ngx.now()
    if now - client.logged_at >= 1 then
        client.logged_at = now
        ngx.log(ngx.ERR, "ratelimit_module: ", message)
    end
end

--- Marks the current request's answer as the package's own: a refusal, or what the failure
--- policy makes of a failed call (a 503, or the 500 of an error). Such an answer says nothing
--- of the service's health, and `load.record` does not count it (counted, a server outage
--- would read as the upstream failing and raise the fleet's level).
local function mark_own()
    ngx.ctx.ratelimit_own = true
end
_M.mark_own = mark_own

--- What a call that the server failed decides, for `policy`: true to admit, false to refuse,
--- nil to return the error (`on_error` unset).
function _M.on_failure(client, policy)
    if client.on_error == "allow" then
        count(client, policy, "failed_open")
        return true
    end
    mark_own()
    if client.on_error == "deny" then
        count(client, policy, "failed_closed")
        return false
    end
    return nil
end

--- A refusal, as shadow mode decides it: true when the request goes through anyway (counted
--- as `shadow`, and logged), false when it is refused (counted as `refused`).
function _M.refused(client, policy, key)
    if client.shadow then
        count(client, policy, "shadow")
        ngx.log(ngx.WARN, "ratelimit_module: shadow: ", policy, " would refuse ", key)
        return true
    end
    count(client, policy, "refused")
    mark_own()
    return false
end

return _M
