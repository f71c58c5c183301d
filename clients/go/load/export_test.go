package load

// NewSignalsAt is signals on a clock, a cgroup directory and a /proc of the test's.
var NewSignalsAt = newSignals

// SetCongested puts the limit in congestion or out of it, as an overload would: what the signals
// read as a busy second.
func (l *ConcurrencyLimit) SetCongested(congested bool) { l.congested = congested }
