// Package ratelimit is the Go client of the redis-ratelimit module for Redis and Valkey:
// typed limiters and results for every command (CL.THROTTLE, RL.WINDOW, RL.LOG, RL.ALL, the
// leases, RL.TOP, the load gate) over go-redis v9, a single server or a Cluster, each decision
// one call decided atomically by the server.
//
// Around the calls: a deadline on every one (the context's and the client's, whichever ends
// first), a failure policy with a circuit and a half-open probe, a deny cache, quota leases for
// one hot limit, the shared allow and deny lists, top keys and Prometheus metrics. Load
// shedding is in package load; net/http middleware in package httprate and gRPC interceptors in
// package grpcrate; drop-ins for go-redis/redis_rate and go-zero's core/limit in packages
// redis_rate and gozero/limit.
//
// Arguments are checked before any call: a bad one (a zero period, no limiter, an unknown
// priority) is an error at once, never a call, a panic or a hang.
package ratelimit
