package load

import (
	"math"
	"runtime"
	"sync"
	"testing"
	"time"
)

// TestTheRunQueueIsTheWorkAheadOfARequest: on one CPU, fifty goroutines started and not yet run
// are fifty requests' worth of wait; none before the no-load latency is known.
func TestTheRunQueueIsTheWorkAheadOfARequest(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	queue := newRunQueue()
	if waited := queue.waited(time.Hour, math.Inf(1)); waited != 0 {
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
	waited := queue.waited(2*time.Hour, 1000)
	close(release)
	started.Wait()
	if waited < 45*time.Millisecond || waited > 60*time.Millisecond {
		t.Fatalf("fifty runnable goroutines of 1 ms each: %v", waited)
	}
	// Read at most once a millisecond: the same instant answers the same.
	if again := queue.waited(2*time.Hour, 1000); again != waited {
		t.Fatalf("read again within the millisecond: %v, then %v", waited, again)
	}
}
