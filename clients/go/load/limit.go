package load

import (
	"errors"
	"math"
	"sync"

	"github.com/redisratelimit/ratelimit"
)

// How many intervals in a row (of those that finished a request) must have taken a latency for
// it to be the no-load latency.
const confirming = 4

// How many calm intervals in a row (of those that decided a request) end congestion: one is an
// overload's arrivals coming and going.
const calmIntervalsToEnd = 4

// The most routes whose latencies are kept apart; a request of any other route is counted with
// those that name none.
const keptRoutes = 32

// latencies is the no-load latency of one route (or of the whole service): the least of the
// current and the previous epoch that confirming intervals in a row (of those that finished one of
// its requests) took at least; until confirming - 1 such intervals have ended, also the least any
// request took (a cold start's).
type latencies struct {
	noloadNow    float64
	noloadBefore float64
	// The fastest request of each of the last intervals that finished any, oldest first.
	recentFastest [confirming - 1]float64
	// The fastest request of the current interval.
	windowMin float64
}

func newLatencies() *latencies {
	l := &latencies{noloadNow: math.Inf(1), noloadBefore: math.Inf(1), windowMin: math.Inf(1)}
	for i := range l.recentFastest {
		l.recentFastest[i] = math.Inf(1)
	}
	return l
}

func (l *latencies) noload() float64 { return math.Min(l.noloadNow, l.noloadBefore) }

// confirmed says whether confirming - 1 intervals have finished a request: past the cold start.
func (l *latencies) confirmed() bool { return !math.IsInf(l.recentFastest[0], 1) }

func (l *latencies) finished(latency float64) {
	l.windowMin = math.Min(l.windowMin, latency)
	if !l.confirmed() {
		l.noloadNow = math.Min(l.noloadNow, latency)
	}
}

// closeInterval: the interval ended, and its fastest lowers the no-load latency as far as the
// intervals before it agree (a fast request now and then is not what the others take).
func (l *latencies) closeInterval() {
	if !math.IsInf(l.windowMin, 1) {
		agreed := l.windowMin
		for _, recent := range l.recentFastest {
			agreed = math.Max(agreed, recent)
		}
		l.noloadNow = math.Min(l.noloadNow, agreed)
		copy(l.recentFastest[:], l.recentFastest[1:])
		l.recentFastest[confirming-2] = l.windowMin
	}
	l.windowMin = math.Inf(1)
}

func (l *latencies) nextEpoch() {
	l.noloadBefore, l.noloadNow = l.noloadNow, math.Inf(1)
}

// LimitOptions are the local limit's parameters (docs/load.md, "The local limit");
// DefaultLimitOptions is what every package of the project ships. Times are whole microseconds,
// so that every package compares them exactly.
type LimitOptions struct {
	// Initial is the limit before anything is measured, and while not congested the least that
	// admits.
	Initial float64
	// Floor is the least it is cut to.
	Floor float64
	// Ceiling is the most it grows to.
	Ceiling float64
	// IntervalUs is how long an interval is.
	IntervalUs int64
	// TargetUs is CoDel's target: a queue shorter than this is no queue.
	TargetUs int64
	// Enter is how many standing intervals in a row begin congestion.
	Enter int
	// Deep is how many targets the fastest request took for congestion to begin at once.
	Deep float64
	// EpochUs is how long the no-load latency is kept (the least of this epoch and the last).
	EpochUs int64
	// Decay is how fast the limit eases down while not congested.
	Decay float64
	// Shares are each class's share of the limit while congested, most important first.
	Shares [4]float64
	// Sojourn is how many times its share of the target a request below the top class may have
	// waited before it is decided, while congested; +Inf: any (a wait known only as a bound).
	Sojourn float64
}

// DefaultLimitOptions is what every package ships.
var DefaultLimitOptions = LimitOptions{
	Initial: 20, Floor: 4, Ceiling: 1000, IntervalUs: 100_000, TargetUs: 5_000, Enter: 4,
	Deep: 4, EpochUs: 30_000_000, Decay: 0.95, Shares: [4]float64{1, 0.6, 0.4, 0.2}, Sojourn: 1,
}

// Check says what is wrong with o, if anything.
func (o LimitOptions) Check() error {
	switch {
	case !(o.Floor > 0) || !(o.Initial >= o.Floor) || !(o.Ceiling >= o.Initial):
		return errors.New("load: 0 < Floor <= Initial <= Ceiling")
	case o.IntervalUs <= 0 || o.TargetUs <= 0 || o.EpochUs <= 0:
		return errors.New("load: IntervalUs, TargetUs and EpochUs are positive")
	case o.Enter < 1 || !(o.Deep > 0) || !(o.Decay > 0 && o.Decay <= 1):
		return errors.New("load: Enter >= 1, Deep > 0, 0 < Decay <= 1")
	case !(o.Sojourn > 0):
		return errors.New("load: Sojourn > 0 (+Inf for any)")
	}
	for _, share := range o.Shares {
		if !(share >= 0 && share <= 1) {
			return errors.New("load: each share is from 0 to 1")
		}
	}
	return nil
}

// ConcurrencyLimit is the instance's own limit on requests in flight, decided at admission with
// no server call (docs/load.md, "The local limit"): it follows measured latency, cuts when a
// standing queue forms (CoDel's test: an interval whose fastest request still waited) and grows
// back while none does, and while congested reserves its top places for the more important
// classes (trunk reservation) and refuses a request below the top class that waited past its
// share of the target (CoDel's sojourn, per request). The same algorithm, step for step, as every package's:
// clients/conformance.json's concurrency traces, which its tests replay exactly.
//
// No I/O: the time is passed in (whole microseconds of a monotonic clock). Safe for concurrent
// use.
type ConcurrencyLimit struct {
	options LimitOptions

	mu          sync.Mutex
	limit       float64
	inflight    int64
	congested   bool
	changes     int64
	congestions int64
	started     bool
	windowEnd   int64
	peak        float64
	admitted    int64
	refused     int64
	waitedOut   int64 // of the refused, how many for their own wait
	byLevel     int64 // of the refused, how many the service's level refused (not the shares)
	// Whether the limit refused a request while not congested: the requests in flight reached it
	// (or the initial limit).
	full        bool
	finished    int64   // the interval's finished requests
	queued      int64   // of the finished, how many took longer than the target
	trough      float64 // the fewest requests in flight or waiting the interval saw
	behind      float64 // the requests the last finished one left waiting (0 where none are counted)
	standingRun int
	// While congested, intervals in a row (of those that decided a request) that ended with
	// the peak under half the limit and fewer refused than admitted.
	calmRun     int
	unexplained int // intervals in a row whose latency no queue here explains
	// Every request's latencies (what admission converts a wait with), and each route's (what
	// the standing-queue test reads: a route's fastest against its own target); the requests
	// that name none, or a route past the first keptRoutes, under unnamed.
	service  *latencies
	unnamed  *latencies
	routes   map[string]*latencies
	epochEnd int64
}

// NewConcurrencyLimit is a limit with options; an error for options that are not sound.
func NewConcurrencyLimit(options LimitOptions) (*ConcurrencyLimit, error) {
	if err := options.Check(); err != nil {
		return nil, err
	}
	return &ConcurrencyLimit{
		options: options, limit: options.Initial,
		service: newLatencies(), unnamed: newLatencies(), routes: map[string]*latencies{},
	}, nil
}

// Options are the limit's parameters.
func (c *ConcurrencyLimit) Options() LimitOptions { return c.options }

// Limit is the limit on requests in flight now.
func (c *ConcurrencyLimit) Limit() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.limit
}

// Inflight is how many admitted requests have not finished.
func (c *ConcurrencyLimit) Inflight() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.inflight
}

// Congested says whether a queue stands: the top places go to the more important classes.
func (c *ConcurrencyLimit) Congested() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.congested
}

// Changes is how many times the limit changed; Congestions how many times congestion began.
func (c *ConcurrencyLimit) Changes() (changes, congestions int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.changes, c.congestions
}

// Noload is the service's no-load latency in µs, over every route: the least of this epoch and
// the last (+Inf before any).
func (c *ConcurrencyLimit) Noload() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.service.noload()
}

// Routes are the routes whose latencies are kept apart, as their requests named them (in no
// order).
func (c *ConcurrencyLimit) Routes() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	names := make([]string, 0, len(c.routes))
	for name := range c.routes {
		names = append(names, name)
	}
	return names
}

// judgingRoute is the route whose fastest request of the interval reads it: of the routes that
// finished a request in it with a no-load latency known (past their cold start, if any is), the
// fastest by nature (then by its fastest, so that the order never matters); nil if no route did.
func (c *ConcurrencyLimit) judgingRoute() *latencies {
	var judge *latencies
	consider := func(route *latencies) {
		if math.IsInf(route.windowMin, 1) || math.IsInf(route.noload(), 1) {
			return
		}
		better := judge == nil ||
			(route.confirmed() && !judge.confirmed()) ||
			(route.confirmed() == judge.confirmed() &&
				(route.noload() < judge.noload() ||
					(route.noload() == judge.noload() && route.windowMin < judge.windowMin)))
		if better {
			judge = route
		}
	}
	consider(c.unnamed)
	for _, route := range c.routes {
		consider(route)
	}
	return judge
}

// roll closes the interval that ended at or before now, if any.
func (c *ConcurrencyLimit) roll(now int64) {
	o := c.options
	if !c.started {
		c.started = true
		c.windowEnd = now + o.IntervalUs
		c.epochEnd = now + o.EpochUs
		return
	}
	for now >= c.epochEnd {
		c.service.nextEpoch()
		c.unnamed.nextEpoch()
		for name, route := range c.routes {
			route.nextEpoch()
			// A route with no request for two epochs leaves its place to another.
			if math.IsInf(route.noload(), 1) {
				delete(c.routes, name)
			}
		}
		c.epochEnd += o.EpochUs
	}
	if now < c.windowEnd {
		return
	}
	bound := c.peak >= c.limit/2
	// The interval is read by the fastest route that finished a request in it (of those past their
	// cold start, if any is): a queue delays every route's requests, and the fastest route's show
	// the least of one; a route's fastest is set against its own target, so that an interval
	// without a fast route's request (a health check's) is no queue.
	judge := c.judgingRoute()
	measured := judge != nil
	fastest, target := math.Inf(1), math.Inf(1)
	if measured {
		fastest, target = judge.windowMin, c.target(judge.noload())
	}
	// While congested, a queue stands whatever the peak: the probe may raise the limit past it.
	standing := measured && (bound || c.congested) && fastest > target
	// While congested, a fastest request slower than every request of the peak ahead of it at the
	// target each: no queue here explains it, the service itself got slower (a dependency). After
	// Enter such intervals the no-load latency is what it takes now.
	if standing && c.congested && fastest > math.Max(1, c.peak)*target {
		c.unexplained++
	} else {
		c.unexplained = 0
	}
	if c.unexplained >= o.Enter {
		for _, l := range c.everyLatencies() {
			if !math.IsInf(l.windowMin, 1) {
				l.noloadNow, l.noloadBefore = l.windowMin, l.windowMin
			}
		}
		c.unexplained = 0
		standing = false
	}
	if standing {
		c.standingRun++
	} else {
		c.standingRun = 0
	}
	before := c.limit
	calm := false
	// A queue that stands while the limit, not congested, is full is an overload already: a burst
	// a healthy service holds neither fills it nor stands.
	atOnce := standing && (fastest > o.Deep*target || c.full)
	switch {
	case standing && (c.congested || atOnce || c.standingRun >= o.Enter):
		gradient := math.Max(0.2, math.Min(0.9, target/fastest))
		c.limit = math.Max(o.Floor, math.Min(c.limit, c.peak)*gradient)
		if !c.congested {
			c.congestions++
		}
		c.congested = true
	case standing:
		// Not yet: a queue must stand for Enter intervals, be deep, or fill the limit.
	case bound && measured:
		switch {
		case !c.congested:
			c.limit = math.Min(o.Ceiling, c.limit+math.Sqrt(c.limit))
		case c.queued*10 <= c.finished || c.trough == 0:
			// Congested, it grows by one, unless a queue came and went at this limit (over a
			// tenth of the requests took longer than the target) while the service never went
			// idle: the limit is what it can hold (a pool's size), and probing past it is a queue.
			c.limit = math.Min(o.Ceiling, c.limit+1)
		}
	case !bound:
		switch {
		case !c.congested:
			c.limit = math.Max(o.Floor, math.Max(2*c.peak, c.limit*o.Decay))
		case c.refused < c.admitted:
			// Shedding keeps the queue short: what it refused is the overload going on. One
			// calm interval is no end (an overload's arrivals come and go).
			calm = true
			if c.calmRun+1 >= calmIntervalsToEnd {
				c.congested = false
			}
		case c.refused-c.waitedOut-c.byLevel >= c.admitted:
			// Refusing by the shares alone, under half the limit: room is probed for (what a
			// request's own wait refused is a queue, not the shares).
			c.limit = math.Min(o.Ceiling, c.limit+math.Sqrt(c.limit))
		}
	}
	switch {
	case calm && c.congested:
		c.calmRun++
	case calm:
		c.calmRun = 0
	case c.admitted > 0 || c.refused > 0:
		// An interval that decided nothing neither continues a calm run nor breaks it.
		c.calmRun = 0
	}
	if c.limit != before {
		c.changes++
	}
	for _, l := range c.everyLatencies() {
		l.closeInterval()
	}
	c.peak = float64(c.inflight)
	c.trough, c.finished, c.queued = float64(c.inflight)+c.behind, 0, 0
	c.admitted, c.refused, c.waitedOut, c.byLevel = 0, 0, 0, 0
	c.full = false
	c.windowEnd = now + o.IntervalUs
}

// everyLatencies are the service's latencies and every route's.
func (c *ConcurrencyLimit) everyLatencies() []*latencies {
	every := make([]*latencies, 0, len(c.routes)+2)
	every = append(every, c.service, c.unnamed)
	for _, route := range c.routes {
		every = append(every, route)
	}
	return every
}

// target is the latency a request may take without a queue standing: the no-load latency plus
// the longer of one more and TargetUs (a burst's queue), or, while congested, plus TargetUs alone
// (CoDel's), so that the queue kept while shedding stays short where requests are slow by nature,
// behind a pool of a few slots.
func (c *ConcurrencyLimit) target(noload float64) float64 {
	if c.congested {
		return noload + float64(c.options.TargetUs)
	}
	return noload + math.Max(noload, float64(c.options.TargetUs))
}

// Admit says whether a request of priority is admitted at now (µs); an admitted one is in
// flight until Finish. backlog is how long it waited before it could be decided (µs): the work
// ahead of it, counted as that many no-load latencies' worth of requests in flight, for every
// class but the top one, and, while congested, its own wait, refused past its share of the
// target (0 where requests wait for nothing before they are decided).
func (c *ConcurrencyLimit) Admit(priority ratelimit.Priority, now, backlog int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.roll(now)
	noload := c.service.noload()
	waiting := 0.0
	if backlog > 0 && !math.IsInf(noload, 1) {
		waiting = float64(backlog) / noload
	}
	load := float64(c.inflight) + waiting
	index := int(priority)
	if index < 0 || index >= len(c.options.Shares) {
		index = int(ratelimit.Sheddable)
	}
	// The top class counts only what is in flight: its places are kept.
	counted := load
	if index == 0 {
		counted = float64(c.inflight)
	}
	var admit, waitedOut bool
	if c.congested {
		share := c.options.Shares[index]
		admit = counted < c.limit*share
		if admit && index > 0 && waiting > 0 {
			waitedOut = float64(backlog) >= c.options.Sojourn*share*c.target(noload)
			admit = !waitedOut
		}
	} else {
		// Not congested, the initial limit admits too: the limit eased down is what the
		// standing-queue test reads, and a burst that a fresh service admits, an idle one
		// admits as well.
		admit = float64(c.inflight) < math.Max(c.limit, c.options.Initial)
		c.full = c.full || !admit
	}
	// The peak is what the limit counted the request against: for the top class, what is in
	// flight alone, so that a loop kept busy by the top class (a readiness probe's, a load
	// test's), whose backlog is a guess, reads as no queue to cut.
	if admit {
		c.admitted++
		c.inflight++
		c.peak = math.Max(c.peak, counted+1)
		return true
	}
	c.peak = math.Max(c.peak, counted)
	c.refused++
	if waitedOut {
		c.waitedOut++
	}
	return false
}

// Finish says an admitted request that names no route ended at now after latency (µs both).
func (c *ConcurrencyLimit) Finish(latency, now int64) {
	c.finish(nil, latency, now, 0)
}

// FinishRoute says an admitted request of route (its method and path pattern) ended at now after
// latency (µs both): its latency is also kept apart, with its route's (the first 32 routes).
func (c *ConcurrencyLimit) FinishRoute(route string, latency, now int64) {
	c.finish(&route, latency, now, 0)
}

// FinishBehind is FinishRoute (Finish for a nil route) for a request that leaves backlog (µs)
// of work waiting for the service, where the package counts it (the run queue's): the service is
// not idle while it waits, though none is in flight.
func (c *ConcurrencyLimit) FinishBehind(route *string, latency, now, backlog int64) {
	c.finish(route, latency, now, backlog)
}

func (c *ConcurrencyLimit) finish(route *string, latency, now, backlog int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.roll(now)
	c.inflight = max(0, c.inflight-1)
	// The requests left waiting for the service (Go's run queue): it is not idle while they
	// wait, though none is in flight.
	c.behind = 0
	if noload := c.service.noload(); backlog > 0 && !math.IsInf(noload, 1) {
		c.behind = float64(backlog) / noload
	}
	c.trough = min(c.trough, float64(c.inflight)+c.behind)
	c.service.finished(float64(latency))
	kept := c.unnamed
	if route != nil {
		kept = c.routeLocked(*route)
	}
	kept.finished(float64(latency))
	c.finished++
	if float64(latency) > c.target(kept.noload()) {
		c.queued++
	}
}

// routeLocked is route's latencies, kept apart for the first keptRoutes routes named.
func (c *ConcurrencyLimit) routeLocked(route string) *latencies {
	if l, ok := c.routes[route]; ok {
		return l
	}
	if len(c.routes) >= keptRoutes {
		return c.unnamed
	}
	l := newLatencies()
	c.routes[route] = l
	return l
}

// ShedByLevel says the service's level refused a request at now before this limit decided it:
// one more refusal of the interval, as shedding's own (the overload goes on while anything is
// refused: the level's refusals keep congestion from ending when they leave this limit only a
// trickle to decide), never in flight.
func (c *ConcurrencyLimit) ShedByLevel(now int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.roll(now)
	c.refused++
	c.byLevel++
}

// Leave says an admitted request ended at now with an answer that says nothing of the service's
// latency (the package's own: a refusal, a failure policy's answer while the server failed), or
// began to wait on the rate-limit server (until Back): it leaves the requests in flight, and no
// latency is counted.
func (c *ConcurrencyLimit) Leave(now int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.roll(now)
	c.inflight = max(0, c.inflight-1)
	c.trough = min(c.trough, float64(c.inflight))
}

// Back says a request that left the requests in flight (Leave) while it waited on the rate-limit
// server got its answer, or gave up on it, at now: it is in flight again, whatever the limit (it
// was admitted). A frozen server's timeout is not the service's concurrency: counted, a service
// whose requests wait on it refuses its other routes.
func (c *ConcurrencyLimit) Back(now int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.roll(now)
	c.inflight++
	c.peak = max(c.peak, float64(c.inflight))
}
