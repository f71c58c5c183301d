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

	mu           sync.Mutex
	limit        float64
	inflight     int64
	congested    bool
	changes      int64
	congestions  int64
	started      bool
	windowEnd    int64
	windowMin    float64
	peak         float64
	admitted     int64
	refused      int64
	waitedOut    int64 // of the refused, how many for their own wait
	finished     int64 // the interval's finished requests
	queued       int64 // of the finished, how many took longer than the target
	trough       int64 // the fewest requests in flight the interval saw
	standingRun  int
	unexplained  int // intervals in a row whose latency no queue here explains
	noloadNow    float64
	noloadBefore float64
	// The fastest request of each of the last intervals that finished any, oldest first. Until
	// all of them have (a cold start), every request's latency lowers the no-load latency: the
	// first requests are what a cold start has.
	recentFastest [confirming - 1]float64
	epochEnd      int64
}

// NewConcurrencyLimit is a limit with options; an error for options that are not sound.
func NewConcurrencyLimit(options LimitOptions) (*ConcurrencyLimit, error) {
	if err := options.Check(); err != nil {
		return nil, err
	}
	limit := &ConcurrencyLimit{
		options: options, limit: options.Initial, windowMin: math.Inf(1),
		noloadNow: math.Inf(1), noloadBefore: math.Inf(1),
	}
	for i := range limit.recentFastest {
		limit.recentFastest[i] = math.Inf(1)
	}
	return limit, nil
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

// Noload is the no-load latency in µs: the least of this epoch and the last (+Inf before any).
func (c *ConcurrencyLimit) Noload() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return math.Min(c.noloadNow, c.noloadBefore)
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
		c.noloadBefore = c.noloadNow
		c.noloadNow = math.Inf(1)
		c.epochEnd += o.EpochUs
	}
	if now < c.windowEnd {
		return
	}
	noload := math.Min(c.noloadNow, c.noloadBefore)
	bound := c.peak >= c.limit/2
	measured := !math.IsInf(c.windowMin, 1) && !math.IsInf(noload, 1)
	target := math.Inf(1)
	if measured {
		target = c.target(noload)
	}
	// While congested, a queue stands whatever the peak: the probe may raise the limit past it.
	standing := measured && (bound || c.congested) && c.windowMin > target
	// While congested, a fastest request slower than every request of the peak ahead of it at the
	// target each: no queue here explains it, the service itself got slower (a dependency). After
	// Enter such intervals the no-load latency is what it takes now.
	if standing && c.congested && c.windowMin > math.Max(1, c.peak)*target {
		c.unexplained++
	} else {
		c.unexplained = 0
	}
	if c.unexplained >= o.Enter {
		c.noloadNow, c.noloadBefore = c.windowMin, c.windowMin
		c.unexplained = 0
		standing = false
	}
	if standing {
		c.standingRun++
	} else {
		c.standingRun = 0
	}
	before := c.limit
	deep := standing && c.windowMin > o.Deep*target
	switch {
	case standing && (c.congested || deep || c.standingRun >= o.Enter):
		gradient := math.Max(0.2, math.Min(0.9, target/c.windowMin))
		c.limit = math.Max(o.Floor, math.Min(c.limit, c.peak)*gradient)
		if !c.congested {
			c.congestions++
		}
		c.congested = true
	case standing:
		// Not yet: a queue must stand for Enter intervals, or be deep.
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
			// Shedding keeps the queue short: what it refused is the overload going on.
			c.congested = false
		case c.refused-c.waitedOut >= c.admitted:
			// Refusing by the shares alone, under half the limit: room is probed for (what a
			// request's own wait refused is a queue, not the shares).
			c.limit = math.Min(o.Ceiling, c.limit+math.Sqrt(c.limit))
		}
	}
	if c.limit != before {
		c.changes++
	}
	// The no-load latency is what confirming intervals in a row (of those that finished a
	// request) took at least: a fast request now and then (a health check beside slow routes) is
	// not what the intervals without it take.
	if !math.IsInf(c.windowMin, 1) {
		confirmed := c.windowMin
		for _, recent := range c.recentFastest {
			confirmed = math.Max(confirmed, recent)
		}
		c.noloadNow = math.Min(c.noloadNow, confirmed)
		copy(c.recentFastest[:], c.recentFastest[1:])
		c.recentFastest[confirming-2] = c.windowMin
	}
	c.windowMin = math.Inf(1)
	c.peak = float64(c.inflight)
	c.trough, c.finished, c.queued = c.inflight, 0, 0
	c.admitted, c.refused, c.waitedOut = 0, 0, 0
	c.windowEnd = now + o.IntervalUs
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
	noload := math.Min(c.noloadNow, c.noloadBefore)
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

// Finish says an admitted request ended at now after latency (µs both).
func (c *ConcurrencyLimit) Finish(latency, now int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.roll(now)
	c.inflight = max(0, c.inflight-1)
	c.windowMin = math.Min(c.windowMin, float64(latency))
	if math.IsInf(c.recentFastest[0], 1) {
		c.noloadNow = math.Min(c.noloadNow, float64(latency))
	}
	c.trough = min(c.trough, c.inflight)
	c.finished++
	if float64(latency) > c.target(math.Min(c.noloadNow, c.noloadBefore)) {
		c.queued++
	}
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
}

// Leave says an admitted request ended at now with an answer that says nothing of the service's
// latency (the package's own: a refusal, a failure policy's answer while the server failed): it
// leaves the requests in flight, and no latency is counted.
func (c *ConcurrencyLimit) Leave(now int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.roll(now)
	c.inflight = max(0, c.inflight-1)
	c.trough = min(c.trough, c.inflight)
}
