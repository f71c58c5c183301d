package testserver

import (
	"math"
	"sync/atomic"
	"time"
)

// Burner keeps a CPU busy as a CPU-bound handler does, and remembers the least time a burn
// took: what a request costs the service with nothing queued ahead of it. Safe for concurrent
// use; the zero value is ready.
type Burner struct{ least atomic.Int64 }

// Burn spins on the calling goroutine for d of the monotonic clock (the scheduler may preempt
// it, as it does a handler).
func (b *Burner) Burn(d time.Duration) {
	started := time.Now()
	spins := 0
	for time.Since(started) < d {
		spins++
	}
	took := int64(time.Since(started))
	for {
		least := b.least.Load()
		if least != 0 && least <= took || b.least.CompareAndSwap(least, took) {
			return
		}
	}
}

// Least is the shortest burn so far (math.MaxInt64 before any).
func (b *Burner) Least() time.Duration {
	if least := b.least.Load(); least != 0 {
		return time.Duration(least)
	}
	return math.MaxInt64
}
