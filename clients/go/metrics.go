package ratelimit

import (
	"time"
)

// Metrics is where decisions are counted, named as every package of the project names them
// (PrometheusMetrics registers them): ratelimit_decisions_total{policy, outcome},
// ratelimit_server_call_duration_seconds, ratelimit_load_level{service} and
// ratelimit_load_decisions_total{service, priority, outcome}.
type Metrics interface {
	// Decision counts a decision of policy (the limiters' names, joined by "+"): allowed,
	// delayed, refused, shed, deny_cache, failed_open, failed_closed, quota, shadow.
	Decision(policy, outcome string)
	// ServerCall times a call to the server.
	ServerCall(took time.Duration)
	// LoadLevel is a service's level, from its reports.
	LoadLevel(service string, level int)
	// LoadDecision counts a load shedder's decision: admitted, shed, shed_local, shadow.
	LoadDecision(service string, priority Priority, outcome string)
}

// NoMetrics counts nothing.
type NoMetrics struct{}

// Decision counts nothing.
func (NoMetrics) Decision(string, string) {}

// ServerCall times nothing.
func (NoMetrics) ServerCall(time.Duration) {}

// LoadLevel sets nothing.
func (NoMetrics) LoadLevel(string, int) {}

// LoadDecision counts nothing.
func (NoMetrics) LoadDecision(string, Priority, string) {}
