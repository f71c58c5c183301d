-- The Lua package of the redis-ratelimit module, for OpenResty and nginx's Lua module.
-- Install from this directory with `luarocks make`, or copy lib/ onto lua_package_path.
rockspec_format = "3.0"
package = "redis-ratelimit-module"
version = "0.3.0-1"
source = {
    url = "file://.",
}
description = {
    summary = "lua-resty-limit-traffic's API on the redis-ratelimit module: shared by every nginx",
    detailed = [[
        resty.ratelimit_module.req, .conn, .count and .traffic keep lua-resty-limit-traffic's
        API and return values, with their state in Redis or Valkey (the redis-ratelimit module),
        so that every nginx of a fleet shares one limit: limit_req's queue (CL.THROTTLE with
        DELAY), limit_conn with leases that free themselves (RL.ACQUIRE), fixed windows
        (RL.WINDOW ANCHORED), and every limiter at once in one atomic call (RL.ALL). Pooled,
        bounded by a timeout, with a failure policy, Redis Cluster routing, a deny cache, HTTP
        fields, Prometheus metrics and shadow mode; and
        graded limiting by load (resty.ratelimit_module.load), its level shared through Redis.
    ]],
    license = "MIT",
}
dependencies = {
    "lua >= 5.1",
}
build = {
    type = "builtin",
    modules = {
        ["resty.ratelimit_module.circuit"] = "lib/resty/ratelimit_module/circuit.lua",
        ["resty.ratelimit_module.client"] = "lib/resty/ratelimit_module/client.lua",
        ["resty.ratelimit_module.cluster"] = "lib/resty/ratelimit_module/cluster.lua",
        ["resty.ratelimit_module.concurrency"] = "lib/resty/ratelimit_module/concurrency.lua",
        ["resty.ratelimit_module.conn"] = "lib/resty/ratelimit_module/conn.lua",
        ["resty.ratelimit_module.count"] = "lib/resty/ratelimit_module/count.lua",
        ["resty.ratelimit_module.deny"] = "lib/resty/ratelimit_module/deny.lua",
        ["resty.ratelimit_module.fields"] = "lib/resty/ratelimit_module/fields.lua",
        ["resty.ratelimit_module.lists"] = "lib/resty/ratelimit_module/lists.lua",
        ["resty.ratelimit_module.load"] = "lib/resty/ratelimit_module/load.lua",
        ["resty.ratelimit_module.metrics"] = "lib/resty/ratelimit_module/metrics.lua",
        ["resty.ratelimit_module.pool"] = "lib/resty/ratelimit_module/pool.lua",
        ["resty.ratelimit_module.protocol"] = "lib/resty/ratelimit_module/protocol.lua",
        ["resty.ratelimit_module.quota"] = "lib/resty/ratelimit_module/quota.lua",
        ["resty.ratelimit_module.req"] = "lib/resty/ratelimit_module/req.lua",
        ["resty.ratelimit_module.resp"] = "lib/resty/ratelimit_module/resp.lua",
        ["resty.ratelimit_module.signals"] = "lib/resty/ratelimit_module/signals.lua",
        ["resty.ratelimit_module.slot"] = "lib/resty/ratelimit_module/slot.lua",
        ["resty.ratelimit_module.specs"] = "lib/resty/ratelimit_module/specs.lua",
        ["resty.ratelimit_module.traffic"] = "lib/resty/ratelimit_module/traffic.lua",
    },
}
