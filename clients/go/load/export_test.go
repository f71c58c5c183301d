package load

// NewSignalsAt is signals on a clock, a cgroup directory and a /proc of the test's.
var NewSignalsAt = newSignals
