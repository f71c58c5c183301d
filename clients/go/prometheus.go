package ratelimit

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// PrometheusMetrics counts into a Prometheus registry, under the names every package of the
// project uses (the nginx package serves the same): ratelimit_decisions_total{policy, outcome},
// ratelimit_server_call_duration_seconds, ratelimit_load_level{service} and
// ratelimit_load_decisions_total{service, priority, outcome}.
type PrometheusMetrics struct {
	decisions *prometheus.CounterVec
	calls     prometheus.Histogram
	level     *prometheus.GaugeVec
	load      *prometheus.CounterVec
}

// NewPrometheusMetrics registers the metrics with registerer (prometheus.DefaultRegisterer
// when nil); metrics already registered there are shared.
func NewPrometheusMetrics(registerer prometheus.Registerer) *PrometheusMetrics {
	if registerer == nil {
		registerer = prometheus.DefaultRegisterer
	}
	m := &PrometheusMetrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelimit_decisions_total", Help: "Rate-limiting decisions, by policy and outcome.",
		}, []string{"policy", "outcome"}),
		calls: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ratelimit_server_call_duration_seconds",
			Help:    "The latency of each call to the rate limiter's server.",
			Buckets: []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1},
		}),
		level: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ratelimit_load_level", Help: "A service's load level, as its last report answered.",
		}, []string{"service"}),
		load: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelimit_load_decisions_total", Help: "The load shedder's decisions, by service, priority and outcome.",
		}, []string{"service", "priority", "outcome"}),
	}
	m.decisions = register(registerer, m.decisions)
	m.calls = register(registerer, m.calls)
	m.level = register(registerer, m.level)
	m.load = register(registerer, m.load)
	return m
}

func register[T prometheus.Collector](registerer prometheus.Registerer, collector T) T {
	if err := registerer.Register(collector); err != nil {
		var already prometheus.AlreadyRegisteredError
		if errors.As(err, &already) {
			if existing, ok := already.ExistingCollector.(T); ok {
				return existing
			}
		}
	}
	return collector
}

// Decision increments ratelimit_decisions_total{policy, outcome}.
func (m *PrometheusMetrics) Decision(policy, outcome string) {
	m.decisions.WithLabelValues(policy, outcome).Inc()
}

// ServerCall observes ratelimit_server_call_duration_seconds.
func (m *PrometheusMetrics) ServerCall(took time.Duration) { m.calls.Observe(took.Seconds()) }

// LoadLevel sets ratelimit_load_level{service}.
func (m *PrometheusMetrics) LoadLevel(service string, level int) {
	m.level.WithLabelValues(service).Set(float64(level))
}

// LoadDecision increments ratelimit_load_decisions_total{service, priority, outcome}.
func (m *PrometheusMetrics) LoadDecision(service string, priority Priority, outcome string) {
	m.load.WithLabelValues(service, priority.String(), outcome).Inc()
}

// Decisions is ratelimit_decisions_total{policy, outcome}.
func (m *PrometheusMetrics) Decisions() *prometheus.CounterVec { return m.decisions }

// LoadDecisions is ratelimit_load_decisions_total{service, priority, outcome}.
func (m *PrometheusMetrics) LoadDecisions() *prometheus.CounterVec { return m.load }

// Level is ratelimit_load_level{service}.
func (m *PrometheusMetrics) Level() *prometheus.GaugeVec { return m.level }
