package load

import (
	"math"
	"runtime"
	"sync"
	"testing"
	"time"
)

// TestTheRunQueueIsTheWorkAheadOfARequest: on one CPU, fifty goroutines started and not yet run
// are fifty requests' worth of wait, less those of the requests in flight; none before the
// no-load latency is known.
func TestTheRunQueueIsTheWorkAheadOfARequest(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	queue := newRunQueue()
	if waited := queue.waited(time.Hour, math.Inf(1), 0); waited != 0 {
		t.Fatalf("before any latency is measured: %v", waited)
	}
	var started sync.WaitGroup
	release := make(chan struct{})
	started.Add(50)
	for range 50 {
		go func() {
			started.Done()
			<-release
		}()
	}
	// Nothing has yielded the CPU since they were started: all fifty are runnable.
	waited := queue.waited(2*time.Hour, 1000, 0)
	less := queue.waited(2*time.Hour, 1000, 10)
	close(release)
	started.Wait()
	if waited < 45*time.Millisecond || waited > 60*time.Millisecond {
		t.Fatalf("fifty runnable goroutines of 1 ms each: %v", waited)
	}
	// Ten of them in flight already (their handlers preempted): not counted again.
	if less != waited-10*time.Millisecond {
		t.Fatalf("ten of %v in flight: %v", waited, less)
	}
	// Read at most once a millisecond: the same instant answers the same.
	if again := queue.waited(2*time.Hour, 1000, 0); again != waited {
		t.Fatalf("read again within the millisecond: %v, then %v", waited, again)
	}
}
