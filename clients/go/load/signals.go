package load

import (
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"time"
)

// window is how far back requests, successes, max_rps and min_rt are counted.
const window = 10

// Signals is what an instance measures of itself between two reports of its load, with no code
// from the user, Go's runtime among them:
//
//   - cpu: in a container with a CPU quota (cgroup v2 cpu.max), the cgroup's use over the quota;
//     otherwise the process's CPU time over the cores it may run on (GOMAXPROCS);
//   - memory: the larger of the heap live after the last collection over the memory limit
//     (GOMEMLIMIT, or else the container's), and the container's memory over its limit (the
//     host's without one);
//   - load: the host's run queue over its cores;
//   - inflight, the mean latency and the errors (5xx) share of the interval; over the last 10 s,
//     the requests and their successes, and from the seconds the local limit was congested
//     only, max_rps and min_rt (the latency of their mix of requests with no queue:
//     noLoadLatency);
//   - gc, the share of the time the world was stopped for collections since the last report,
//     and goroutines, the goroutines alive: reported when the service's policy declares them
//     (FACTOR gc MEAN, FACTOR goroutines MAX), since the server refuses a report of a factor it
//     does not know.
//
// Safe for concurrent use.
type Signals struct {
	now    func() time.Duration
	cgroup string
	proc   string

	mu        sync.Mutex
	inflight  int64
	latencies float64
	finished  int64
	failed    int64
	seconds   []second

	cpuAt         time.Duration
	cpuUsed       float64
	gcPaused      float64
	gcTotal       float64
	cpuRead, gcOn bool
}

type second struct {
	at        int64
	completed int64
	routes    map[string]*routeSecond
	requests  int64
	successes int64
	busy      bool
}

// routeSecond is a route's requests completed in a second, and the least latency (ms) of them.
type routeSecond struct {
	completed int64
	fastest   float64
}

// RoutesKept is how many routes a second keeps apart for min_rt; past them, the others share one
// entry.
const RoutesKept = 32

// The keys of no route named and of the routes past RoutesKept: no method and path pattern
// holds a NUL byte.
const (
	noRoute     = "\x00none"
	otherRoutes = "\x00other"
)

var started = time.Now()

// monotonic is the time since the process loaded the package, on the monotonic clock.
func monotonic() time.Duration { return time.Since(started) }

// NewSignals reads the system's clock, cgroup and /proc.
func NewSignals() *Signals {
	return newSignals(monotonic, "/sys/fs/cgroup", "/proc")
}

func newSignals(now func() time.Duration, cgroup, proc string) *Signals {
	s := &Signals{now: now, cgroup: cgroup, proc: proc}
	s.cpu() // the first reading is the baseline
	s.gcShare()
	return s
}

// second is the current second's counts, dropping those older than the window.
func (s *Signals) second(now time.Duration) *second {
	at := int64(now / time.Second)
	if len(s.seconds) == 0 || s.seconds[len(s.seconds)-1].at != at {
		s.seconds = append(s.seconds, second{at: at, routes: map[string]*routeSecond{}})
	}
	drop := 0
	for drop < len(s.seconds) && s.seconds[drop].at <= at-window {
		drop++
	}
	s.seconds = s.seconds[drop:]
	return &s.seconds[len(s.seconds)-1]
}

// Started says a request began.
func (s *Signals) Started() {
	s.mu.Lock()
	s.inflight++
	s.mu.Unlock()
}

// Left says a request ended with an answer that says nothing of the service: it leaves, nothing
// else is counted.
func (s *Signals) Left() {
	s.mu.Lock()
	s.inflight = max(0, s.inflight-1)
	s.mu.Unlock()
}

// Done says a request ended after latency with HTTP status (5xx: failed); busy when the local
// limit was congested (its throughput was the capacity, not the demand).
func (s *Signals) Done(latency time.Duration, status int, busy bool) {
	s.DoneRoute(nil, latency, status, busy)
}

// DoneRoute is Done for a request of route (its method and path pattern; nil: none named), whose
// least latency is kept apart (min_rt).
func (s *Signals) DoneRoute(route *string, latency time.Duration, status int, busy bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inflight = max(0, s.inflight-1)
	ms := float64(latency) / float64(time.Millisecond)
	s.latencies += ms
	s.finished++
	failed := status >= 500
	if failed {
		s.failed++
	}
	one := s.second(s.now())
	one.completed++
	key := noRoute
	if route != nil {
		key = *route
	}
	kept := one.routes[key]
	if kept == nil && len(one.routes) >= RoutesKept {
		key = otherRoutes
		kept = one.routes[key]
	}
	if kept == nil {
		kept = &routeSecond{fastest: math.Inf(1)}
		one.routes[key] = kept
	}
	kept.completed++
	kept.fastest = math.Min(kept.fastest, ms)
	one.requests++
	if !failed {
		one.successes++
	}
	one.busy = one.busy || busy
}

// Sample is the factors to report now, with gc and goroutines when declared says so; the
// interval starts again.
func (s *Signals) Sample(declared func(string) bool) map[string]float64 {
	factors := map[string]float64{}
	if cpu, ok := s.cpu(); ok {
		factors["cpu"] = cpu
	}
	if memory, ok := s.memory(); ok {
		factors["memory"] = memory
	}
	if load, ok := s.load(); ok {
		factors["load"] = load
	}
	if paused := s.gcShare(); declared != nil && declared("gc") {
		factors["gc"] = paused
	}
	if declared != nil && declared("goroutines") {
		factors["goroutines"] = float64(runtime.NumGoroutine())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.second(s.now())
	factors["inflight"] = float64(s.inflight)
	if s.finished > 0 {
		factors["latency"] = s.latencies / float64(s.finished)
		factors["errors"] = float64(s.failed) / float64(s.finished)
	}
	var most, requests, successes int64
	var busy []second
	for _, one := range s.seconds {
		if one.completed > 0 && one.busy {
			most = max(most, one.completed)
			busy = append(busy, one)
		}
		requests += one.requests
		successes += one.successes
	}
	if most > 0 {
		factors["max_rps"] = float64(most)
		factors["min_rt"] = noLoadLatency(busy)
	}
	factors["requests"] = float64(requests)
	factors["successes"] = float64(successes)
	s.latencies, s.finished, s.failed = 0, 0, 0
	return factors
}

// noLoadLatency is the latency (ms) of the busy seconds' mix of requests with no queue, BBR's min
// RTT: each route's least latency over them (its no-load latency), weighted by how many requests
// it completed in them. With one route, its least latency; with a fast health check beside slow
// work, the work's, not the check's (the least latency of all would shrink the pipe to what the
// check holds, and read a service at its capacity as many times over it).
func noLoadLatency(busy []second) float64 {
	routes := map[string]*routeSecond{}
	for _, one := range busy {
		for route, kept := range one.routes {
			total := routes[route]
			if total == nil {
				total = &routeSecond{fastest: math.Inf(1)}
				routes[route] = total
			}
			total.completed += kept.completed
			total.fastest = math.Min(total.fastest, kept.fastest)
		}
	}
	var weighted float64
	var completed int64
	for _, total := range routes {
		weighted += float64(total.completed) * total.fastest
		completed += total.completed
	}
	return weighted / float64(completed)
}

func (s *Signals) read(path string) (string, bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", false
	}
	return strings.TrimSpace(string(data)), true
}

// quota is the cgroup's CPU quota in cores, if it has one.
func (s *Signals) quota() (float64, bool) {
	line, ok := s.read(filepath.Join(s.cgroup, "cpu.max"))
	if !ok {
		return 0, false
	}
	parts := strings.Fields(line)
	if len(parts) != 2 || parts[0] == "max" {
		return 0, false
	}
	quota, err1 := strconv.ParseFloat(parts[0], 64)
	period, err2 := strconv.ParseFloat(parts[1], 64)
	if err1 != nil || err2 != nil || period <= 0 {
		return 0, false
	}
	return math.Max(quota/period, 0.01), true
}

// used is the CPU seconds used so far, and the cores they are counted over.
func (s *Signals) used() (used, cores float64, ok bool) {
	if quota, limited := s.quota(); limited {
		stat, found := s.read(filepath.Join(s.cgroup, "cpu.stat"))
		if !found {
			return 0, 0, false
		}
		for _, line := range strings.Split(stat, "\n") {
			if value, found := strings.CutPrefix(line, "usage_usec "); found {
				usec, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
				return usec / 1e6, quota, err == nil
			}
		}
		return 0, 0, false
	}
	seconds, found := processCPU()
	return seconds, float64(runtime.GOMAXPROCS(0)), found
}

// cpu is the CPU in use since the last reading, 0 to 1 of what the process may use.
func (s *Signals) cpu() (float64, bool) {
	used, cores, ok := s.used()
	if !ok {
		return 0, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	lastAt, lastUsed, read := s.cpuAt, s.cpuUsed, s.cpuRead
	s.cpuAt, s.cpuUsed, s.cpuRead = now, used, true
	if !read || now <= lastAt {
		return 0, false
	}
	share := (used - lastUsed) / ((now - lastAt).Seconds() * cores)
	return math.Max(0, math.Min(1, share)), true
}

// runtimeMetrics reads Go's own metrics by name, in the order given.
func runtimeMetrics(names ...string) []float64 {
	samples := make([]metrics.Sample, len(names))
	for index, name := range names {
		samples[index].Name = name
	}
	metrics.Read(samples)
	values := make([]float64, len(names))
	for index, sample := range samples {
		switch sample.Value.Kind() {
		case metrics.KindUint64:
			values[index] = float64(sample.Value.Uint64())
		case metrics.KindFloat64:
			values[index] = sample.Value.Float64()
		default:
			values[index] = -1
		}
	}
	return values
}

// memory is the heap live after the last collection over the memory limit, or the container's
// (host's) memory, whichever is fuller.
func (s *Signals) memory() (float64, bool) {
	share := -1.0
	current, hasCurrent := s.number(filepath.Join(s.cgroup, "memory.current"))
	limit, hasLimit := s.number(filepath.Join(s.cgroup, "memory.max"))
	values := runtimeMetrics("/gc/heap/live:bytes", "/gc/gomemlimit:bytes")
	live, goLimit := values[0], values[1]
	if goLimit <= 0 || goLimit >= math.MaxInt64/2 {
		goLimit = -1
		if hasLimit {
			goLimit = limit
		}
	}
	if live >= 0 && goLimit > 0 {
		share = live / goLimit
	}
	if hasCurrent && hasLimit {
		share = math.Max(share, current/math.Max(1, limit))
	} else if meminfo, ok := s.read(filepath.Join(s.proc, "meminfo")); ok {
		total, available := field(meminfo, "MemTotal"), field(meminfo, "MemAvailable")
		if total > 0 && available >= 0 {
			share = math.Max(share, (total-available)/total)
		}
	}
	if share < 0 {
		return 0, false
	}
	return math.Max(0, math.Min(1, share)), true
}

func (s *Signals) number(path string) (float64, bool) {
	text, ok := s.read(path)
	if !ok {
		return 0, false
	}
	value, err := strconv.ParseFloat(text, 64)
	return value, err == nil
}

func field(meminfo, name string) float64 {
	for _, line := range strings.Split(meminfo, "\n") {
		if rest, found := strings.CutPrefix(line, name+":"); found {
			parts := strings.Fields(rest)
			if len(parts) > 0 {
				if value, err := strconv.ParseFloat(parts[0], 64); err == nil {
					return value
				}
			}
		}
	}
	return -1
}

// load is the host's run queue over its cores.
func (s *Signals) load() (float64, bool) {
	text, ok := s.read(filepath.Join(s.proc, "loadavg"))
	if !ok {
		return 0, false
	}
	parts := strings.Fields(text)
	if len(parts) == 0 {
		return 0, false
	}
	load1, err := strconv.ParseFloat(parts[0], 64)
	if err != nil {
		return 0, false
	}
	return load1 / float64(max(1, runtime.NumCPU())), true
}

// gcShare is the share of the time the world was stopped for collections since the last
// reading: Go's estimate of the CPU its pauses took, over all the CPU it could have used.
func (s *Signals) gcShare() float64 {
	values := runtimeMetrics("/cpu/classes/gc/pause:cpu-seconds", "/cpu/classes/total:cpu-seconds")
	s.mu.Lock()
	defer s.mu.Unlock()
	paused, total := values[0], values[1]
	lastPaused, lastTotal, on := s.gcPaused, s.gcTotal, s.gcOn
	s.gcPaused, s.gcTotal, s.gcOn = paused, total, true
	if !on || paused < 0 || total <= lastTotal {
		return 0
	}
	return math.Max(0, math.Min(1, (paused-lastPaused)/(total-lastTotal)))
}
