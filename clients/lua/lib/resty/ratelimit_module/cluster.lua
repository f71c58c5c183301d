-- Routing on a Redis Cluster: the slot map, read from the first seed node that answers, and
-- the node serving a key's slot; a redirection (MOVED, ASK) parsed into where to go next.
local pool = require "resty.ratelimit_module.pool"
local slot = require "resty.ratelimit_module.slot"

local find, match, sub = string.find, string.match, string.sub
local ipairs, tonumber, tostring, type = ipairs, tonumber, tostring, type

local _M = { _VERSION = "0.3.0" }

--- `host:port` as its host and port.
local function split_node(node)
    local colon = find(node, ":[^:]*$")
    return sub(node, 1, colon - 1), tonumber(sub(node, colon + 1))
end
_M.split_node = split_node

-- Reads the slot map of `client`'s Cluster from its seed nodes (the first that answers).
local function load_slots(client, deadline)
    local last_err = "no seed node"
    for _, seed in ipairs(client.cluster) do
        local host, port = split_node(seed)
        local red, err = pool.redis(client, host, port, deadline)
        if red then
            local ranges
            ranges, err = red:cluster("slots")
            if type(ranges) == "table" then
                red:set_keepalive(client.keepalive, client.pool_size)
                local slots = {}
                for _, range in ipairs(ranges) do
                    local master = range[3]
                    local node = master[1] .. ":" .. master[2]
                    for at = range[1], range[2] do
                        slots[at] = node
                    end
                end
                client.slots = slots
                return true
            end
            red:close()
        end
        last_err = seed .. ": " .. tostring(err)
    end
    return nil, last_err
end

--- Where `client`'s command for `key` goes: the host and port, or nil and the error.
function _M.node_for(client, key, deadline)
    if not client.cluster then
        return client.host, client.port
    end
    if not client.slots or client.reload then
        client.reload = false
        local ok, err = load_slots(client, deadline)
        if not ok and not client.slots then
            return nil, err
        end
    end
    local node = client.slots[slot.slot(key)]
    if not node then
        return nil, "no node serves the slot of " .. key
    end
    return split_node(node)
end

--- What an error reply `err` redirects to: "MOVED" or "ASK", the slot and the node; nil
--- for any other error. A MOVED slot is taken at once, the whole map read again before the
--- client's next call.
function _M.redirect(client, err)
    local kind, at, node = match(err or "", "^(%u+) (%d+) (%S+)$")
    if kind == "MOVED" and client.slots then
        client.slots[tonumber(at)] = node
        client.reload = true
        return kind, node
    elseif kind == "ASK" then
        return kind, node
    end
    return nil
end

return _M
