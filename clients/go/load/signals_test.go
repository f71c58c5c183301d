package load_test

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/redisratelimit/ratelimit/load"
)

// A health check of 1 ms polled beside work of 30 ms or more: the pipe is what the work holds. The
// least latency of all would read it as a thirtieth of that, and a service at its capacity as
// thirty times over it (bbr).
func TestMinRTIsTheNoLoadLatencyOfTheMixNotOfItsFastestRoute(t *testing.T) {
	clock := &monotonic{}
	signals := load.NewSignalsAt(clock.now, t.TempDir(), "/proc")
	health, work := "GET /health", "GET /work"
	clock.advance(3500 * time.Millisecond)
	signals.DoneRoute(&health, time.Millisecond, 200, true)
	for _, latency := range []time.Duration{40, 30, 50} {
		signals.DoneRoute(&work, latency*time.Millisecond, 200, true)
	}
	clock.advance(time.Second)
	signals.DoneRoute(&work, 35*time.Millisecond, 200, true)
	factors := signals.Sample(nil)
	want := (4*30.0 + 1*1) / 5
	if factors["max_rps"] != 4 || math.Abs(factors["min_rt"]-want) > 1e-9 {
		t.Fatalf("max_rps 4 and min_rt %v (the work's 30 ms for its four, the check's 1 ms for its one): %v", want, factors)
	}
	// A second not busy counts for neither.
	clock.advance(time.Second)
	signals.DoneRoute(&health, time.Millisecond/2, 200, false)
	if got := signals.Sample(nil)["min_rt"]; math.Abs(got-want) > 1e-9 {
		t.Fatalf("a second not busy changed min_rt to %v", got)
	}
	// Done names no route: one route of its own.
	clock.advance(10 * time.Second)
	signals.Done(20*time.Millisecond, 200, true)
	signals.Done(25*time.Millisecond, 200, true)
	if got := signals.Sample(nil)["min_rt"]; got != 20 {
		t.Fatalf("two requests of no route named: %v", got)
	}
}

func TestASecondKeepsSoManyRoutesApartAndTheRestTogether(t *testing.T) {
	clock := &monotonic{}
	signals := load.NewSignalsAt(clock.now, t.TempDir(), "/proc")
	clock.advance(1500 * time.Millisecond)
	for route := range load.RoutesKept {
		name := fmt.Sprintf("GET /%d", route)
		signals.DoneRoute(&name, 10*time.Millisecond, 200, true)
	}
	// Past them, two routes share an entry: the least of the two for both requests.
	late, later := "GET /late", "GET /later"
	signals.DoneRoute(&late, 20*time.Millisecond, 200, true)
	signals.DoneRoute(&later, 60*time.Millisecond, 200, true)
	want := (float64(load.RoutesKept)*10 + 2*20) / float64(load.RoutesKept+2)
	if got := signals.Sample(nil)["min_rt"]; math.Abs(got-want) > 1e-9 {
		t.Fatalf("min_rt %v, want %v", got, want)
	}
}
