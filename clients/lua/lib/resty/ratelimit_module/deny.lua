-- The deny cache (the `deny_cache` option, a lua_shared_dict): a refusal with a retry_after is
-- answered from the dict until then, by every worker, without asking the server.
local ngx = ngx

local _M = { _VERSION = "0.3.0" }

--- The seconds a refusal cached under `id` still stands, if it does (`id` is nil without a
--- deny cache: the limiters make it only when there is one).
function _M.denied(client, id)
    local cache = client.deny_cache
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
function _M.deny(client, id, seconds)
    local cache = client.deny_cache
    if cache and id and seconds and seconds > 0 then
        cache:set(id, ngx.now() + seconds, seconds)
    end
end

return _M
