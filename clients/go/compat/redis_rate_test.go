package compat

import (
	"context"
	"testing"
	"time"

	original "github.com/go-redis/redis_rate/v10"

	"github.com/redisratelimit/ratelimit/redis_rate"
)

// call is one call of a sequence: AllowN, AllowAtMost or Reset, with n.
type call struct {
	how string
	n   int
}

// TestTheDropInAnswersAsRedisRatesScript runs the same sequences of calls through
// go-redis/redis_rate (its Lua script) and the drop-in on the same server, one call of each
// in turn: the same Allowed and Remaining, and times within the longest that passed on the
// server's clock between the two calls of a pair (and the millisecond the module's replies
// round to).
func TestTheDropInAnswersAsRedisRatesScript(t *testing.T) {
	rdb := server(t)
	ctx := context.Background()
	theirs, ours := original.NewLimiter(rdb), redis_rate.NewLimiter(rdb)
	// Slow rates: no call of a pair crosses a token's boundary while the other does not. And
	// intervals a float holds exactly: at 7 an hour, the script's floating point refuses a request
	// that fits exactly, by a few nanoseconds (docs/migrating.md).
	limits := []struct {
		theirs original.Limit
		ours   redis_rate.Limit
	}{
		{original.PerHour(100), redis_rate.PerHour(100)},
		{original.PerMinute(2), redis_rate.PerMinute(2)},
		{original.Limit{Rate: 2, Burst: 5, Period: time.Minute}, redis_rate.Limit{Rate: 2, Burst: 5, Period: time.Minute}},
		{original.Limit{Rate: 4, Burst: 1, Period: time.Hour}, redis_rate.Limit{Rate: 4, Burst: 1, Period: time.Hour}},
	}
	sequence := []call{
		{"allow", 1}, {"allow", 1}, {"allow", 3}, {"atmost", 4}, {"allow", 1}, {"allow", 0},
		{"allow", 200}, {"atmost", 2}, {"reset", 0}, {"atmost", 200}, {"allow", 1}, {"allow", 6},
		{"reset", 0}, {"allow", 5}, {"allow", 1},
	}
	for _, limit := range limits {
		key := unique("redis_rate")
		// A key's state is what every call since it began wrote, each library's a little
		// after the other's: their times differ by at most the longest pair so far.
		var longest time.Duration
		for step, one := range sequence {
			before := serverTime(t, rdb)
			var mine *redis_rate.Result
			var got *original.Result
			var err1, err2 error
			switch one.how {
			case "reset":
				err1, err2 = theirs.Reset(ctx, key), ours.Reset(ctx, key)
			case "allow":
				got, err1 = theirs.AllowN(ctx, key, limit.theirs, one.n)
				mine, err2 = ours.AllowN(ctx, key, limit.ours, one.n)
			default:
				got, err1 = theirs.AllowAtMost(ctx, key, limit.theirs, one.n)
				mine, err2 = ours.AllowAtMost(ctx, key, limit.ours, one.n)
			}
			longest = max(longest, serverTime(t, rdb).Sub(before))
			passed := longest + time.Millisecond
			if err1 != nil || err2 != nil {
				t.Fatalf("%v, step %d %v: %v / %v", limit.ours, step, one, err1, err2)
			}
			if got == nil {
				continue
			}
			near := func(a, b time.Duration) bool {
				if a < 0 || b < 0 {
					return a == b
				}
				return (a - b).Abs() <= passed
			}
			if got.Allowed != mine.Allowed || got.Remaining != mine.Remaining ||
				!near(got.RetryAfter, mine.RetryAfter) || !near(got.ResetAfter, mine.ResetAfter) ||
				got.Limit.String() != mine.Limit.String() {
				t.Fatalf("%v, step %d %v: the script answers %+v, the drop-in %+v (%v passed)", limit.ours, step, one, got, mine, passed)
			}
		}
	}
}
