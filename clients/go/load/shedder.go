// Package load is load shedding (docs/load.md) with two checks on every request, neither a
// server call:
//
//   - the instance's own limit on requests in flight (ConcurrencyLimit): it follows the measured
//     latency, cuts when a queue stands and, while congested, keeps its top places for the more
//     important classes; it needs no server at all;
//   - the fleet's level: the instance reports its health (Signals: CPU, memory with the heap
//     after collection, in flight, latency, 5xx...) under the service's key once an interval,
//     and learns in the same call the level and the share of each class it admits.
//
// A request goes on only when both admit it. When a report fails, the last level holds until
// the report's time to live ends, then nothing is shed by level; the instance's own limit goes
// on. Middleware sheds before a net/http handler; package grpcrate has the gRPC interceptors.
package load

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/redisratelimit/ratelimit"
)

// Shedder sheds a service's load: it reports the instance's signals under the service's key
// every interval from a goroutine of its own, until Close, and admits or sheds each request.
// Safe for concurrent use: one per service per process.
type Shedder struct {
	client   *ratelimit.Client
	service  string
	instance string
	interval time.Duration
	ttl      time.Duration
	shadow   bool
	metrics  ratelimit.Metrics
	signals  *Signals
	factors  func() map[string]float64
	draw     func() float64
	now      func() time.Duration
	limit    *ConcurrencyLimit
	logger   *slog.Logger
	manual   bool
	options  LimitOptions
	noLimit  bool
	clocked  bool
	queue    *runQueue

	mu         sync.Mutex
	standing   ratelimit.Standing
	reportedAt time.Duration
	reported   bool
	declared   map[string]bool
	reports    int
	stop       chan struct{}
	stopped    chan struct{}
}

// An Option configures a Shedder.
type Option func(*Shedder)

// Instance names this process among the service's instances (host:pid).
func Instance(name string) Option { return func(s *Shedder) { s.instance = name } }

// Interval is the time between reports (1 s).
func Interval(d time.Duration) Option { return func(s *Shedder) { s.interval = d } }

// TTL is how long a report counts (3 intervals).
func TTL(d time.Duration) Option { return func(s *Shedder) { s.ttl = d } }

// Shadow sheds nothing: what would be shed is counted (outcome "shadow") and logged.
func Shadow(on bool) Option { return func(s *Shedder) { s.shadow = on } }

// WithMetrics counts the decisions there (the client's metrics by default).
func WithMetrics(metrics ratelimit.Metrics) Option { return func(s *Shedder) { s.metrics = metrics } }

// Factors adds the application's own numbers to each report (a queue's backlog, a pool's
// waiters): names the service's policy declares with FACTOR name MAX|MEAN|SUM. A function that
// panics costs its factors, never the report.
func Factors(factors func() map[string]float64) Option {
	return func(s *Shedder) { s.factors = factors }
}

// runQueueLimitOptions are the defaults every package ships, but for Sojourn: the wait a request
// is decided with here is the run queue's work shared out (runQueue), not the request's own, and
// on one core it comes in whole requests, so a wait past a sheddable request's share of the target
// (a fifth of it) is any request queued at all. Sojourn is one over the least share instead: the
// least important class is refused once its wait reaches the whole target (CoDel's own sojourn
// test), and each class above it once its wait reaches as many targets as its share is times
// the least one's. At 1 (every other package's), the admitted p99 held in bench/overload.py's
// shape (f) but goodput fell to 77% of the capacity; off, goodput held but the p99 did not
// (docs/load.md, "Where it falls short").
var runQueueLimitOptions = func() LimitOptions {
	options := DefaultLimitOptions
	options.Sojourn = 1 / options.Shares[len(options.Shares)-1]
	return options
}()

// Limit runs the local limit with options instead of the defaults every package ships.
func Limit(options LimitOptions) Option { return func(s *Shedder) { s.options = options } }

// WithoutLimit sheds by the level alone: no local limit.
func WithoutLimit() Option { return func(s *Shedder) { s.noLimit = true } }

// WithSignals reports signals (the process's and the container's by default).
func WithSignals(signals *Signals) Option { return func(s *Shedder) { s.signals = signals } }

// WithLogger logs through logger (slog's default).
func WithLogger(logger *slog.Logger) Option { return func(s *Shedder) { s.logger = logger } }

// WithClock decides by now (a monotonic time) and draw (uniform in [0, 1)), with no wait for
// the scheduler counted: the tests'.
func WithClock(now func() time.Duration, draw func() float64) Option {
	return func(s *Shedder) { s.now, s.draw, s.clocked = now, draw, true }
}

// Manual starts no reporting goroutine: the caller reports (Report), as the tests do.
func Manual() Option { return func(s *Shedder) { s.manual = true } }

// NewShedder sheds the load of service (its key on the server), reporting through client every
// interval from now until Close; an error for a bad option.
func NewShedder(client *ratelimit.Client, service string, opts ...Option) (*Shedder, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: a ratelimit.Client", ratelimit.ErrInvalid)
	}
	s := &Shedder{
		client: client, service: service, instance: defaultInstance(), interval: time.Second,
		draw: rand.Float64, now: monotonic, logger: slog.Default(), options: runQueueLimitOptions,
		standing: ratelimit.NothingShed,
	}
	for _, opt := range opts {
		if opt != nil {
			opt(s)
		}
	}
	if s.ttl == 0 {
		s.ttl = 3 * s.interval
	}
	if s.metrics == nil {
		s.metrics = client.Metrics()
	}
	switch {
	case service == "":
		return nil, fmt.Errorf("%w: a service's key is a non-empty string", ratelimit.ErrInvalid)
	case ratelimit.CheckInstance(s.instance) != nil:
		return nil, ratelimit.CheckInstance(s.instance)
	case s.interval <= 0 || s.ttl <= 0:
		return nil, fmt.Errorf("%w: Interval and TTL are positive durations", ratelimit.ErrInvalid)
	case s.now == nil || s.draw == nil || s.logger == nil:
		return nil, fmt.Errorf("%w: a clock, a draw and a logger", ratelimit.ErrInvalid)
	}
	if !s.noLimit {
		limit, err := NewConcurrencyLimit(s.options)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ratelimit.ErrInvalid, err)
		}
		s.limit = limit
	}
	if s.signals == nil {
		s.signals = newSignals(s.now, "/sys/fs/cgroup", "/proc")
	}
	if s.limit != nil && !s.clocked {
		s.queue = newRunQueue()
	}
	if !s.manual {
		s.stop, s.stopped = make(chan struct{}), make(chan struct{})
		go s.reporting(s.stop, s.stopped)
	}
	return s, nil
}

// defaultInstance is host:pid, in the characters an instance may have.
func defaultInstance() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "go"
	}
	name := []rune(fmt.Sprintf("%s:%d", host, os.Getpid()))
	for index, r := range name {
		if ratelimit.CheckInstance(string(r)) != nil {
			name[index] = '-'
		}
	}
	if len(name) > 64 {
		name = name[len(name)-64:]
	}
	return string(name)
}

func (s *Shedder) reporting(stop <-chan struct{}, stopped chan<- struct{}) {
	defer close(stopped)
	ticker := time.NewTicker(s.interval)
	defer ticker.Stop()
	for {
		_, _ = s.Report(context.Background())
		select {
		case <-stop:
			return
		case <-ticker.C:
		}
	}
}

// Close stops reporting (the last report ends with its time to live).
func (s *Shedder) Close() {
	s.mu.Lock()
	stop := s.stop
	s.stop = nil
	s.mu.Unlock()
	if stop != nil {
		close(stop)
		<-s.stopped
	}
}

// Service is the service's key.
func (s *Shedder) Service() string { return s.service }

// Limit is the local limit, or nil when off.
func (s *Shedder) Limit() *ConcurrencyLimit { return s.limit }

// Signals are what the shedder reports.
func (s *Shedder) Signals() *Signals { return s.signals }

// RetryAfter is what a shed request is told to wait: one interval, when the level may have
// changed.
func (s *Shedder) RetryAfter() time.Duration { return s.interval }

// Standing is the service's level and shares from the last report that answered; nothing shed
// once that report's time to live has passed.
func (s *Shedder) Standing() ratelimit.Standing {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.reported || s.now()-s.reportedAt > s.ttl {
		return ratelimit.NothingShed
	}
	return s.standing
}

// policyEvery is how many reports go between two readings of the policy's declared factors.
const policyEvery = 30

// declaredFactors is which factors the service's policy declares, read now and then: gc and
// goroutines are reported only when it does (the server refuses a factor it does not know).
func (s *Shedder) declaredFactors(ctx context.Context) map[string]bool {
	s.mu.Lock()
	due := s.reports%policyEvery == 0
	s.reports++
	declared := s.declared
	s.mu.Unlock()
	if !due {
		return declared
	}
	words, err := s.client.LoadPolicy(ctx, s.service)
	if err != nil {
		return declared
	}
	fresh := map[string]bool{}
	for index := 0; index+1 < len(words); index++ {
		if strings.EqualFold(words[index], "FACTOR") {
			fresh[strings.ToLower(words[index+1])] = true
		}
	}
	s.mu.Lock()
	s.declared = fresh
	s.mu.Unlock()
	return fresh
}

// reportFactors is the report's factors now: the signals and the application's own, by name.
func (s *Shedder) reportFactors(declared map[string]bool) []ratelimit.Factor {
	sample := s.signals.Sample(func(name string) bool { return declared[name] })
	if s.factors != nil {
		func() {
			defer func() {
				if failed := recover(); failed != nil {
					s.logger.Warn("ratelimit: the load factors failed", "service", s.service, "error", failed)
				}
			}()
			for name, value := range s.factors() {
				sample[name] = value
			}
		}()
	}
	names := make([]string, 0, len(sample))
	for name := range sample {
		names = append(names, name)
	}
	sort.Strings(names)
	factors := make([]ratelimit.Factor, len(names))
	for index, name := range names {
		factors[index] = ratelimit.Factor{Name: name, Value: sample[name]}
	}
	return factors
}

// Report reports now: the standing the server answered, or an error (logged) when the report
// failed and the last level holds.
func (s *Shedder) Report(ctx context.Context) (ratelimit.Standing, error) {
	factors := s.reportFactors(s.declaredFactors(ctx))
	standing, err := s.client.ReportLoad(ctx, s.service, s.instance, s.ttl, factors)
	if err != nil {
		s.logger.Warn("ratelimit: the load report failed", "service", s.service, "error", err)
		return ratelimit.Standing{}, err
	}
	s.mu.Lock()
	s.standing, s.reportedAt, s.reported = standing, s.now(), true
	s.mu.Unlock()
	s.metrics.LoadLevel(s.service, standing.Level)
	return standing, nil
}

// Ticket is what Admit gives a request that goes on, for Finished (and Waiting).
type Ticket struct {
	started time.Duration
	counted bool
	// Its waits on the rate-limit server, when the local limit counts it.
	waits *serverWaits
}

// serverWaits is how many waits on the rate-limit server a request has going on (out of the
// requests in flight meanwhile), and whether it finished.
type serverWaits struct {
	mu    sync.Mutex
	going int
	done  bool
}

func micros(d time.Duration) int64 { return d.Microseconds() }

// Admit says whether a request of priority goes on: a ticket (for Finished) and true when both
// the level (the share it gives the class, at random) and the local limit admit it; false when
// it is shed. In shadow mode always true, counting what would be shed.
func (s *Shedder) Admit(priority ratelimit.Priority) (Ticket, bool) {
	return s.AdmitBeside(priority, 0)
}

// AdmitBeside is Admit for a request whose server started serverGoroutines goroutines of its
// own for it that have not run yet: net/http's background read of a request with no body, and
// gRPC's transport, start one each (the middleware and the interceptors pass it). They are
// runnable, but no work queued ahead of the request, so its wait leaves them out; counted, every
// request would wait one no-load latency more than it did, and that latency, measured with
// them, would grow by one request's time every epoch.
func (s *Shedder) AdmitBeside(priority ratelimit.Priority, serverGoroutines int) (Ticket, bool) {
	standing := s.Standing()
	byLevel := s.draw() < standing.Share(priority)
	at := s.now()
	waited := s.waited(at, serverGoroutines)
	counted := byLevel && s.limit != nil && s.limit.Admit(priority, micros(at), micros(waited))
	// What the level refused is shedding too: the limit counts it among its interval's refusals.
	if !byLevel && s.limit != nil {
		s.limit.ShedByLevel(micros(at))
	}
	admitted := byLevel && (counted || s.limit == nil)
	outcome := "admitted"
	switch {
	case admitted:
	case s.shadow:
		outcome = "shadow"
	case byLevel:
		outcome = "shed_local"
	default:
		outcome = "shed"
	}
	s.metrics.LoadDecision(s.service, priority, outcome)
	if outcome == "shadow" {
		by := "by the instance's limit"
		if !byLevel {
			by = fmt.Sprintf("at level %d", standing.Level)
		}
		s.logger.Info("ratelimit: shadow: would be shed", "priority", priority.String(), "by", by, "service", s.service)
	}
	if !admitted && !s.shadow {
		return Ticket{}, false
	}
	s.signals.Started()
	ticket := Ticket{started: at - waited, counted: counted}
	if counted {
		ticket.waits = &serverWaits{}
	}
	return ticket, true
}

// Waited is how long a request decided now is counted as having waited for a CPU before the
// middleware saw it (0 where nothing queues for one).
func (s *Shedder) Waited() time.Duration { return s.waited(s.now(), 0) }

func (s *Shedder) waited(now time.Duration, serverGoroutines int) time.Duration {
	if s.limit == nil {
		return 0
	}
	return s.queue.waited(now, s.limit.Noload(), s.limit.Inflight()+int64(max(0, serverGoroutines)))
}

// Finished says the request ticket was given for ended with HTTP status; own when the package
// answered it by its policy (ratelimit.Answered): then, as for any 429, it leaves the requests in
// flight and says nothing of the service's health, nor its latency of the local limit's.
func (s *Shedder) Finished(ticket Ticket, status int, own bool) {
	s.finished(ticket, status, own, nil)
}

// FinishedRoute is Finished for a request of route (its method and path pattern, or a gRPC
// call's full method), whose latency the local limit keeps apart (the first 32 routes): an
// interval without a fast route's request (a health check's) then reads as no queue.
func (s *Shedder) FinishedRoute(ticket Ticket, status int, own bool, route string) {
	s.finished(ticket, status, own, &route)
}

// Waiting says the request ticket was given for begins (begins) or ends a wait on the rate-limit
// server: it leaves the local limit's requests in flight meanwhile (a frozen server's timeout is
// not the service's concurrency; counted, a service whose requests wait on it refuses its other
// routes). The middleware and the interceptors call it through the request's context
// (ratelimit.WatchRequest).
func (s *Shedder) Waiting(ticket Ticket, begins bool) {
	if ticket.waits == nil || s.limit == nil {
		return
	}
	waits := ticket.waits
	waits.mu.Lock()
	defer waits.mu.Unlock()
	// The first wait to begin leaves, the last to end comes back; none once it finished.
	if begins {
		waits.going++
		if waits.going == 1 && !waits.done {
			s.limit.Leave(micros(s.now()))
		}
		return
	}
	waits.going--
	if waits.going == 0 && !waits.done {
		s.limit.Back(micros(s.now()))
	}
}

func (s *Shedder) finished(ticket Ticket, status int, own bool, route *string) {
	now := s.now()
	latency := max(0, now-ticket.started)
	congested := false
	if waits := ticket.waits; waits != nil && s.limit != nil {
		waits.mu.Lock()
		if waits.going > 0 && !waits.done {
			// It ended while waiting on the server: in flight again, to leave as it ends.
			s.limit.Back(micros(now))
		}
		waits.done = true
		waits.mu.Unlock()
	}
	if s.limit != nil {
		// The package's own answer took the server's time (a failed call's timeout), or none,
		// not the service's: the limit counts no latency of it.
		if ticket.counted && own {
			s.limit.Leave(micros(now))
		} else if ticket.counted {
			// The run queue's work now, which it leaves waiting: on one core none is in flight
			// between two requests while the next ones wait, and the limit must not read that as
			// an idle service.
			s.limit.FinishBehind(route, micros(latency), micros(now), micros(s.waited(now, 0)))
		}
		congested = s.limit.Congested()
	}
	if ratelimit.CountsForService(status, own) {
		s.signals.DoneRoute(route, latency, status, congested)
	} else {
		s.signals.Left()
	}
}

// Middleware sheds before next: 503 with Retry-After (one interval) for a request shed, its
// priority read by priority (PriorityHeader("X-Priority") when nil). chi, gorilla/mux and the
// standard mux take it as it is.
func Middleware(shedder *Shedder, priority func(*http.Request) ratelimit.Priority) func(http.Handler) http.Handler {
	if priority == nil {
		priority = PriorityHeader("X-Priority")
	}
	retryAfter := fmt.Sprint(int64((shedder.RetryAfter() + time.Second - 1) / time.Second))
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ticket, ok := shedder.AdmitBeside(priority(r), backgroundReads(r))
			if !ok {
				w.Header().Set("Retry-After", retryAfter)
				http.Error(w, "overloaded: try again later", http.StatusServiceUnavailable)
				return
			}
			ctx := ratelimit.WatchRequest(r.Context(), func(begins bool) { shedder.Waiting(ticket, begins) })
			recorder := &statusRecorder{ResponseWriter: w}
			status := http.StatusInternalServerError
			watched := r.WithContext(ctx)
			defer func() {
				shedder.FinishedRoute(ticket, status, ratelimit.Answered(ctx), routeOf(watched))
			}()
			next.ServeHTTP(recorder, watched)
			status = recorder.Status()
		})
	}
}

// routeOf is the route a request took, for the local limit to keep its latency apart: its method
// and the pattern the standard mux matched (Request.Pattern, its method and host aside), read once
// the handler answered; the path where no pattern is known (another router).
func routeOf(r *http.Request) string {
	pattern := r.Pattern
	if _, path, withMethod := strings.Cut(pattern, " "); withMethod {
		pattern = path
	}
	if pattern == "" {
		pattern = r.URL.Path
	} else if slash := strings.IndexByte(pattern, '/'); slash > 0 {
		pattern = pattern[slash:]
	}
	return r.Method + " " + pattern
}

// backgroundReads is how many goroutines net/http started for r that have not run when its
// handler begins: HTTP/1's background read, started at once for a request with no body (one
// with a body starts it once the body is read).
func backgroundReads(r *http.Request) int {
	if r.ProtoMajor == 1 && (r.Body == nil || r.Body == http.NoBody) {
		return 1
	}
	return 0
}

// PriorityHeader reads a request's priority from header (critical_plus, critical,
// sheddable_plus, sheddable); one naming none, or another, is sheddable.
func PriorityHeader(header string) func(*http.Request) ratelimit.Priority {
	return func(r *http.Request) ratelimit.Priority {
		return ratelimit.PriorityOr(r.Header.Get(header), ratelimit.Sheddable)
	}
}

// statusRecorder remembers the status a handler answered; http.ResponseController reaches the
// writer beneath through Unwrap.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
	r.ResponseWriter.WriteHeader(status)
}

func (r *statusRecorder) Write(body []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(body)
}

// Flush flushes the writer beneath, if it can.
func (r *statusRecorder) Flush() { _ = http.NewResponseController(r.ResponseWriter).Flush() }

func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// Status is the status answered (200 when the handler wrote nothing).
func (r *statusRecorder) Status() int {
	if r.status == 0 {
		return http.StatusOK
	}
	return r.status
}
