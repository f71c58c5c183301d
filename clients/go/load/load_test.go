package load_test

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/redisratelimit/ratelimit"
	"github.com/redisratelimit/ratelimit/internal/testserver"
	"github.com/redisratelimit/ratelimit/load"
)

func newClient(t *testing.T, rdb redis.UniversalClient, opts ...ratelimit.ClientOption) *ratelimit.Client {
	t.Helper()
	client, err := ratelimit.NewClient(rdb, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

func newShedder(t *testing.T, client *ratelimit.Client, service string, opts ...load.Option) *load.Shedder {
	t.Helper()
	shedder, err := load.NewShedder(client, service, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(shedder.Close)
	return shedder
}

// get is a request to url with X-Priority: priority (none when ""): its status and headers.
func get(t *testing.T, url, priority string) (int, http.Header) {
	t.Helper()
	request, _ := http.NewRequest(http.MethodGet, url, nil)
	if priority != "" {
		request.Header.Set("X-Priority", priority)
	}
	response, err := http.DefaultClient.Do(request)
	if err != nil {
		t.Fatal(err)
	}
	_ = response.Body.Close()
	return response.StatusCode, response.Header
}

func ok(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }

func TestAHealthyServiceIsNeverShedWithTheDefaults(t *testing.T) {
	client := newClient(t, testserver.Client(t))
	shedder := newShedder(t, client, testserver.Unique("healthy"), load.Interval(100*time.Millisecond))
	server := httptest.NewServer(load.Middleware(shedder, nil)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(time.Millisecond)
		ok(w, r)
	})))
	defer server.Close()
	// Eight callers at once, each waiting for its answer: at most eight in flight, well under
	// the service's capacity, every class, over a dozen report intervals.
	var refused atomic.Int64
	var wg sync.WaitGroup
	for caller := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			priority := []string{"", "critical_plus", "critical", "sheddable_plus", "sheddable"}[caller%5]
			for range 150 {
				if status, _ := get(t, server.URL, priority); status != 200 {
					refused.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	standing := shedder.Standing()
	if refused.Load() != 0 || standing.Level != 0 {
		t.Fatalf("%d of 1,200 requests refused, level %d", refused.Load(), standing.Level)
	}
	if limit := shedder.Limit(); limit.Congested() || limit.Inflight() != 0 {
		t.Fatalf("the local limit: congested %v, %d in flight", limit.Congested(), limit.Inflight())
	}
}

func TestTheLocalLimitKeepsEachRouteApartByTheMuxsPattern(t *testing.T) {
	client := newClient(t, testserver.Client(t))
	shedder := newShedder(t, client, testserver.Unique("routes"), load.Manual())
	mux := http.NewServeMux()
	mux.HandleFunc("GET /items/{number}", ok)
	mux.HandleFunc("/", ok)
	server := httptest.NewServer(load.Middleware(shedder, nil)(mux))
	defer server.Close()
	for _, path := range []string{"/items/1", "/items/2", "/other"} {
		if status, _ := get(t, server.URL+path, "critical"); status != 200 {
			t.Fatalf("%s: %d", path, status)
		}
	}
	// The middleware counts a request's end before its handler returns to the server: every
	// route is named once the responses are read.
	routes := shedder.Limit().Routes()
	sort.Strings(routes)
	if want := []string{"GET /", "GET /items/{number}"}; !reflect.DeepEqual(routes, want) {
		t.Fatalf("routes %q, want %q", routes, want)
	}
}

func TestTheFleetsLevelShedsByPriorityAndShadowModeCountsIt(t *testing.T) {
	rdb := testserver.Client(t)
	ctx := context.Background()
	service := testserver.Unique("level")
	if err := rdb.Do(ctx, "RL.LOAD.POLICY", service, "HOLD", "0", "LEVEL", "inflight", "5", "SHARES", "1", "1", "0", "0").Err(); err != nil {
		t.Fatal(err)
	}
	hot := func(inflight string) {
		if err := rdb.Do(ctx, "RL.LOAD.REPORT", service, "hot", "60000", "inflight", inflight).Err(); err != nil {
			t.Fatal(err)
		}
	}
	hot("50")
	registry := prometheus.NewRegistry()
	metrics := ratelimit.NewPrometheusMetrics(registry)
	client := newClient(t, rdb)
	shedder := newShedder(t, client, service, load.Manual(), load.WithMetrics(metrics))
	shadow := newShedder(t, client, service, load.Manual(), load.Shadow(true), load.Instance("shadow-1"), load.WithMetrics(metrics))
	for _, one := range []*load.Shedder{shedder, shadow} {
		if standing, err := one.Report(ctx); err != nil || standing.Level != 1 {
			t.Fatalf("report: %+v %v", standing, err)
		}
	}
	if level := testutil.ToFloat64(metrics.Level().WithLabelValues(service)); level != 1 {
		t.Fatalf("ratelimit_load_level = %v", level)
	}
	server := httptest.NewServer(load.Middleware(shedder, nil)(http.HandlerFunc(ok)))
	defer server.Close()
	shadowed := httptest.NewServer(load.Middleware(shadow, nil)(http.HandlerFunc(ok)))
	defer shadowed.Close()
	for _, priority := range []string{"sheddable", "sheddable_plus", ""} {
		if status, header := get(t, server.URL, priority); status != 503 || header.Get("Retry-After") != "1" {
			t.Fatalf("%q: %d, Retry-After %q", priority, status, header.Get("Retry-After"))
		}
		if status, _ := get(t, shadowed.URL, priority); status != 200 {
			t.Fatalf("shadow, %q: %d", priority, status)
		}
	}
	for _, priority := range []string{"critical", "critical_plus"} {
		if status, _ := get(t, server.URL, priority); status != 200 {
			t.Fatalf("%q: %d", priority, status)
		}
	}
	decisions := metrics.LoadDecisions()
	if shed := testutil.ToFloat64(decisions.WithLabelValues(service, "sheddable", "shed")); shed != 2 {
		t.Fatalf("shed sheddable: %v", shed)
	}
	if shadows := testutil.ToFloat64(decisions.WithLabelValues(service, "sheddable", "shadow")); shadows != 2 {
		t.Fatalf("shadow sheddable: %v", shadows)
	}
	hot("0")
	if standing, err := shedder.Report(ctx); err != nil || standing.Level != 0 {
		t.Fatalf("cool: %+v %v", standing, err)
	}
	if status, _ := get(t, server.URL, "sheddable"); status != 200 {
		t.Fatalf("once the hot instance reports cool: %d", status)
	}
}

// monotonic is a time the test moves.
type monotonic struct{ at atomic.Int64 }

func (m *monotonic) now() time.Duration       { return time.Duration(m.at.Load()) }
func (m *monotonic) advance(by time.Duration) { m.at.Add(int64(by)) }

func TestTheShedderTellsTheSignalsEachRequestsRoute(t *testing.T) {
	client := newClient(t, testserver.Client(t))
	clock := &monotonic{}
	shedder := newShedder(t, client, testserver.Unique("signal-routes"), load.Manual(),
		load.WithClock(clock.now, func() float64 { return 0.5 }))
	shedder.Limit().SetCongested(true) // busy seconds: what min_rt reads
	for _, request := range []struct {
		route   string
		latency time.Duration
	}{{"GET /health", time.Millisecond}, {"GET /work", 30 * time.Millisecond}} {
		ticket, admitted := shedder.Admit(ratelimit.CriticalPlus)
		if !admitted {
			t.Fatal("the top class is admitted")
		}
		clock.advance(request.latency)
		shedder.FinishedRoute(ticket, 200, false, request.route)
	}
	// Each route's least latency, weighted by its one request (unnamed, the least: 1 ms).
	if got := shedder.Signals().Sample(nil)["min_rt"]; math.Abs(got-(1+30)/2.0) > 1e-6 {
		t.Fatalf("min_rt %v", got)
	}
}

func TestAFrozenServerEndsTheLevelAfterItsTTLAndTheLocalLimitGoesOn(t *testing.T) {
	rdb := testserver.Client(t)
	ctx := context.Background()
	service := testserver.Unique("frozen")
	if err := rdb.Do(ctx, "RL.LOAD.POLICY", service, "HOLD", "0", "LEVEL", "inflight", "5", "SHARES", "1", "1", "0", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Do(ctx, "RL.LOAD.REPORT", service, "hot", "60000", "inflight", "50").Err(); err != nil {
		t.Fatal(err)
	}
	proxy := testserver.NewFrozenProxy(t)
	behind := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
	t.Cleanup(func() { _ = behind.Close() })
	clock := &monotonic{}
	draw := func() float64 { return 0.5 }
	shedder := newShedder(t, newClient(t, behind, ratelimit.Timeout(100*time.Millisecond)), service,
		load.Manual(), load.WithClock(clock.now, draw))
	if standing, err := shedder.Report(ctx); err != nil || standing.Level != 1 {
		t.Fatalf("report: %+v %v", standing, err)
	}
	proxy.Freeze()
	defer proxy.Thaw()
	clock.advance(time.Second)
	if _, err := shedder.Report(ctx); err == nil {
		t.Fatal("a frozen server fails the report")
	}
	if _, admitted := shedder.Admit(ratelimit.Sheddable); admitted {
		t.Fatal("the last level holds for the report's time to live")
	}
	clock.advance(2*time.Second + time.Millisecond)
	if standing := shedder.Standing(); standing.Level != 0 {
		t.Fatalf("after the time to live, no level: %+v", standing)
	}
	// The local limit needs no server: a queue that stands is shed by priority. One request
	// takes a millisecond (the no-load latency); then each takes a whole interval.
	fast, _ := shedder.Admit(ratelimit.Critical)
	clock.advance(time.Millisecond)
	shedder.Finished(fast, 200, false)
	var tickets []load.Ticket
	for range 40 {
		if ticket, admitted := shedder.Admit(ratelimit.Critical); admitted {
			tickets = append(tickets, ticket)
		}
	}
	for interval := 0; interval < 12 && !shedder.Limit().Congested(); interval++ {
		clock.advance(100 * time.Millisecond)
		for _, ticket := range tickets {
			shedder.Finished(ticket, 200, false) // each took the interval: a standing queue
		}
		tickets = tickets[:0]
		for range 40 {
			if ticket, admitted := shedder.Admit(ratelimit.Critical); admitted {
				tickets = append(tickets, ticket)
			}
		}
	}
	if !shedder.Limit().Congested() {
		t.Fatal("a standing queue congests the local limit")
	}
	if _, admitted := shedder.Admit(ratelimit.Sheddable); admitted {
		t.Fatal("congested, sheddable is shed first")
	}
	if _, admitted := shedder.Admit(ratelimit.CriticalPlus); !admitted {
		t.Fatal("congested, critical_plus keeps its places")
	}
}

func TestWhatTheLevelShedsHoldsTheLocalLimitCongested(t *testing.T) {
	rdb := testserver.Client(t)
	ctx := context.Background()
	service := testserver.Unique("held")
	if err := rdb.Do(ctx, "RL.LOAD.POLICY", service, "HOLD", "0", "LEVEL", "inflight", "5", "SHARES", "1", "1", "0", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Do(ctx, "RL.LOAD.REPORT", service, "hot", "60000", "inflight", "50").Err(); err != nil {
		t.Fatal(err)
	}
	clock := &monotonic{}
	shedder := newShedder(t, newClient(t, rdb), service, load.Manual(),
		load.WithClock(clock.now, func() float64 { return 0.5 }))
	// A standing queue congests the local limit: a millisecond's request, then each taking a
	// whole interval.
	fast, _ := shedder.Admit(ratelimit.Critical)
	clock.advance(time.Millisecond)
	shedder.Finished(fast, 200, false)
	limit := shedder.Limit()
	for interval := 0; interval < 12 && !limit.Congested(); interval++ {
		var tickets []load.Ticket
		for range 40 {
			if ticket, admitted := shedder.Admit(ratelimit.Critical); admitted {
				tickets = append(tickets, ticket)
			}
		}
		clock.advance(100 * time.Millisecond)
		for _, ticket := range tickets {
			shedder.Finished(ticket, 200, false)
		}
	}
	if !limit.Congested() {
		t.Fatal("a standing queue congests the local limit")
	}
	for limit.Inflight() > 0 {
		limit.Finish(1000, clock.now().Microseconds())
	}
	if standing, err := shedder.Report(ctx); err != nil || standing.Level != 1 {
		t.Fatalf("report: %+v %v", standing, err)
	}
	// An interval in which the level refuses ten requests and leaves the limit one, fast, under
	// half the limit: the overload goes on, and congestion holds.
	clock.advance(100 * time.Millisecond)
	ticket, admitted := shedder.Admit(ratelimit.Critical)
	if !admitted {
		t.Fatal("congested, critical has places")
	}
	clock.advance(time.Millisecond)
	shedder.Finished(ticket, 200, false)
	for range 10 {
		if _, admitted := shedder.Admit(ratelimit.Sheddable); admitted {
			t.Fatal("level 1 sheds sheddable")
		}
	}
	clock.advance(100 * time.Millisecond)
	ticket, _ = shedder.Admit(ratelimit.CriticalPlus)
	if !limit.Congested() {
		t.Fatal("ten refused by the level, one admitted: congestion holds")
	}
	// Intervals the level refuses nothing of: congestion ends at the fourth in a row.
	shedder.Finished(ticket, 200, false)
	for calm := 1; calm < 4; calm++ {
		clock.advance(100 * time.Millisecond)
		ticket, _ = shedder.Admit(ratelimit.CriticalPlus)
		if !limit.Congested() {
			t.Fatalf("%d calm intervals in a row: congestion holds", calm)
		}
		shedder.Finished(ticket, 200, false)
	}
	clock.advance(100 * time.Millisecond)
	shedder.Admit(ratelimit.CriticalPlus)
	if limit.Congested() {
		t.Fatal("nothing refused, under half the limit: congestion ends")
	}
}

func TestARequestWaitingOnTheRateLimitServerIsNotInFlight(t *testing.T) {
	// A server frozen as its clients see it: it accepts and reads, and never answers.
	frozen, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = frozen.Close() }()
	received := make(chan struct{}, 1)
	go func() {
		for {
			conn, err := frozen.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = conn.Close() }()
				buffer := make([]byte, 512)
				for {
					if _, err := conn.Read(buffer); err != nil {
						return
					}
					select {
					case received <- struct{}{}:
					default:
					}
				}
			}()
		}
	}()
	shedder := newShedder(t, newClient(t, testserver.Client(t)), testserver.Unique("waits"), load.Manual())
	healthy := newClient(t, testserver.Client(t))
	stalled := newClient(t, redis.NewClient(&redis.Options{Addr: frozen.Addr().String(), MaxRetries: -1}),
		ratelimit.Timeout(2*time.Second), ratelimit.WithOnError(ratelimit.Allow))
	var seen []int64
	var mu sync.Mutex
	handler := load.Middleware(shedder, nil)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		client := healthy
		if r.URL.Path == "/frozen" {
			client = stalled
		}
		limiter := ratelimit.Throttle{Key: testserver.Unique("waits"), MaxBurst: 10, Count: 10, Period: time.Second}
		_, _ = client.Check(r.Context(), []ratelimit.Limiter{limiter})
		// The server answered (or the wait gave up): in flight again.
		mu.Lock()
		seen = append(seen, shedder.Limit().Inflight())
		mu.Unlock()
		ok(w, r)
	}))
	server := httptest.NewServer(handler)
	defer server.Close()
	get(t, server.URL+"/healthy", "critical")
	answered := make(chan int)
	go func() {
		status, _ := get(t, server.URL+"/frozen", "critical")
		answered <- status
	}()
	<-received
	if inflight := shedder.Limit().Inflight(); inflight != 0 {
		t.Fatalf("waiting on the server, %d in flight", inflight)
	}
	if status := <-answered; status != http.StatusOK {
		t.Fatalf("allowed after the timeout: %d", status)
	}
	mu.Lock()
	defer mu.Unlock()
	if !reflect.DeepEqual(seen, []int64{1, 1}) || shedder.Limit().Inflight() != 0 {
		t.Fatalf("in flight once answered: %v, after: %d", seen, shedder.Limit().Inflight())
	}
}

func TestTheLimitersOwnAnswersAreNotTheServices(t *testing.T) {
	client := newClient(t, testserver.Client(t))
	shedder := newShedder(t, client, testserver.Unique("own"), load.Manual())
	handler := load.Middleware(shedder, nil)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/own":
			ratelimit.MarkOwn(r.Context())
			http.Error(w, "the limiter's", http.StatusServiceUnavailable)
		case "/limited":
			http.Error(w, "limited", http.StatusTooManyRequests)
		case "/failing":
			http.Error(w, "the service's", http.StatusInternalServerError)
		default:
			ok(w, r)
		}
	}))
	server := httptest.NewServer(handler)
	defer server.Close()
	for _, path := range []string{"/own", "/limited", "/failing", "/"} {
		get(t, server.URL+path, "critical")
	}
	factors := shedder.Signals().Sample(nil)
	if factors["requests"] != 2 || factors["successes"] != 1 || factors["errors"] != 0.5 || factors["inflight"] != 0 {
		t.Fatalf("the service's two answers count, the limiter's two leave: %v", factors)
	}
}

func TestThePackagesOwnAnswerLeavesTheLocalLimitUnmeasured(t *testing.T) {
	clock := &monotonic{}
	shedder := newShedder(t, newClient(t, testserver.Client(t)), testserver.Unique("own"),
		load.Manual(), load.WithClock(clock.now, func() float64 { return 0.5 }))
	limit := shedder.Limit()
	// A request the package answered after a failing server's 1 s timeout: it leaves the requests
	// in flight, and its second is no latency of the service's.
	ticket, _ := shedder.Admit(ratelimit.Critical)
	if limit.Inflight() != 1 {
		t.Fatalf("in flight: %d", limit.Inflight())
	}
	clock.advance(time.Second)
	shedder.Finished(ticket, http.StatusServiceUnavailable, true)
	if limit.Inflight() != 0 || !math.IsInf(limit.Noload(), 1) {
		t.Fatalf("the package's own answer left %d in flight, a no-load latency of %v µs", limit.Inflight(), limit.Noload())
	}
	// The service's own answer is its latency.
	ticket, _ = shedder.Admit(ratelimit.Critical)
	clock.advance(2 * time.Millisecond)
	shedder.Finished(ticket, http.StatusOK, false)
	if limit.Noload() != 2000 {
		t.Fatalf("the service's answer took 2000 µs, not %v", limit.Noload())
	}
}

func TestTheSignalsReadTheCgroupAndGoRuntime(t *testing.T) {
	client := newClient(t, testserver.Client(t))
	ctx := context.Background()
	service := testserver.Unique("signals")
	rdb := testserver.Client(t)
	clock := &monotonic{}
	cgroup := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(cgroup, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("cpu.max", "50000 100000\n")
	write("cpu.stat", "usage_usec 1000000\nuser_usec 1\n")
	write("memory.current", "300\n")
	write("memory.max", "1000\n")
	signals := load.NewSignalsAt(clock.now, cgroup, "/proc")
	clock.advance(time.Second)
	write("cpu.stat", "usage_usec 1250000\n")
	factors := signals.Sample(nil)
	if factors["cpu"] != 0.5 {
		t.Fatalf("a quarter of a second over a second of half a core: %v", factors["cpu"])
	}
	if factors["memory"] < 0.3 {
		t.Fatalf("memory is at least the cgroup's 0.3: %v", factors["memory"])
	}
	if _, found := factors["gc"]; found {
		t.Fatalf("gc is reported only when declared: %v", factors)
	}
	declared := signals.Sample(func(name string) bool { return name == "gc" || name == "goroutines" })
	if declared["goroutines"] < 1 || declared["gc"] < 0 || declared["gc"] > 1 {
		t.Fatalf("gc and goroutines when declared: %v", declared)
	}

	// Reported to the server: without the policy declaring them, gc and goroutines are left out
	// (it refuses a factor it does not know); once declared, they go in.
	failing := func() map[string]float64 { panic("the application's factors failed") }
	shedder := newShedder(t, client, service, load.Manual(), load.Factors(failing))
	if _, err := shedder.Report(ctx); err != nil {
		t.Fatalf("a report without the declared factors, the application's failing: %v", err)
	}
	if err := rdb.Do(ctx, "RL.LOAD.POLICY", service, "FACTOR", "gc", "MEAN", "FACTOR", "goroutines", "MAX",
		"LEVEL", "goroutines", "1000000", "SHARES", "1", "1", "1", "0").Err(); err != nil {
		t.Fatal(err)
	}
	declaring := newShedder(t, client, service, load.Manual(), load.Instance("declaring"))
	if _, err := declaring.Report(ctx); err != nil {
		t.Fatal(err)
	}
	status, err := rdb.Do(ctx, "RL.LOAD.STATUS", service).Slice()
	if err != nil {
		t.Fatal(err)
	}
	if text := strings.ToLower(strings.Join(flatten(status), " ")); !strings.Contains(text, "goroutines") || !strings.Contains(text, "gc") {
		t.Fatalf("the status shows the declared factors: %s", text)
	}
}

// flatten is every word of a reply, nested arrays' included.
func flatten(values []any) []string {
	var out []string
	for _, value := range values {
		if nested, ok := value.([]any); ok {
			out = append(out, flatten(nested)...)
		} else {
			out = append(out, fmt.Sprint(value))
		}
	}
	return out
}

// TestTheNoLoadLatencyHoldsOnAnIdleService: on one CPU, one request at a time, each burning a
// millisecond of CPU, over a dozen of the limit's epochs (shortened to 20 ms here): the no-load
// latency stays what a request takes. net/http starts a goroutine of its own for each request
// without a body (its background read) that has not run when the middleware decides; counted as
// work ahead of the request, it made each request wait one no-load latency more, and the no-load
// latency, measured with it, grew by a request's time every epoch.
func TestTheNoLoadLatencyHoldsOnAnIdleService(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	client := newClient(t, testserver.Client(t))
	options := load.DefaultLimitOptions
	options.EpochUs = 20_000
	shedder := newShedder(t, client, testserver.Unique("idle"), load.Limit(options), load.Manual())
	var handler testserver.Burner
	server := httptest.NewServer(load.Middleware(shedder, nil)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handler.Burn(time.Millisecond)
		ok(w, r)
	})))
	defer server.Close()
	began := time.Now()
	for requests := 0; requests < 100 || time.Since(began) < 12*20*time.Millisecond; requests++ {
		if status, _ := get(t, server.URL, "critical"); status != 200 {
			t.Fatalf("request %d: %d", requests, status)
		}
	}
	noload := time.Duration(shedder.Limit().Noload() * float64(time.Microsecond))
	if bound := 3 * handler.Least(); noload > bound {
		t.Fatalf("the no-load latency is %v; the fastest handler took %v (bound: three times that)", noload, handler.Least())
	}
}
