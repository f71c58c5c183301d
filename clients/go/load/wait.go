package load

import (
	"math"
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"
)

// readEvery is how often the run queue is read: at most once a millisecond, by the request
// that finds the last reading older.
const readEvery = time.Millisecond

// runQueue estimates the work queued for a CPU ahead of a request. A net/http server starts a
// goroutine per connection at once; where the service is CPU-bound, the queue forms among the
// runnable goroutines (its connections', waiting for a CPU to read their request and run the
// middleware), and what runs reaches its handler and keeps the CPU: the requests in flight stay
// few and each takes its own time, however long the queue. The Go runtime counts that queue
// (runtime/metrics' /sched/goroutines/runnable): as many goroutines over GOMAXPROCS, each worth
// a request's no-load latency, is the wait a request decided now is counted with, its backlog at
// admission. The requests already in flight are not counted again: a CPU-bound handler the
// scheduler preempted is runnable too.
type runQueue struct {
	mu       sync.Mutex
	sample   []metrics.Sample
	runnable atomic.Uint64
	readAt   atomic.Int64 // ns of the monotonic clock
}

func newRunQueue() *runQueue {
	return &runQueue{sample: []metrics.Sample{{Name: "/sched/goroutines/runnable:goroutines"}}}
}

// waited is the queue's work at now, in requests of noload each (µs; +Inf before any), less the
// inflight requests' goroutines.
func (q *runQueue) waited(now time.Duration, noload float64, inflight int64) time.Duration {
	if q == nil || math.IsInf(noload, 1) {
		return 0
	}
	if int64(now)-q.readAt.Load() >= int64(readEvery) && q.mu.TryLock() {
		metrics.Read(q.sample)
		if q.sample[0].Value.Kind() == metrics.KindUint64 {
			q.runnable.Store(q.sample[0].Value.Uint64())
		}
		q.readAt.Store(int64(now))
		q.mu.Unlock()
	}
	queued := float64(max(0, int64(q.runnable.Load())-inflight)) / float64(runtime.GOMAXPROCS(0))
	return time.Duration(queued * noload * float64(time.Microsecond))
}
