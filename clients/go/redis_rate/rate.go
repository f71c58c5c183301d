// Package redis_rate is a drop-in for github.com/go-redis/redis_rate/v10: the same Limiter,
// Limit and Result, the same calls, decided by the module's CL.THROTTLE (GCRA, as the script is)
// in one command instead of a Lua script. Change the import path; NewLimiter takes the same
// go-redis client.
//
// Where it differs from the script, on purpose:
//   - a request that can never fit (n above the burst) is refused with the wait the script gives
//     (the time until the limiter is full again, plus what n lacks of the burst), never admitted;
//   - keys are "rl:rate:" + key, not the script's "rate:" + key: during a rolling deploy neither
//     meets the other's state (the script cannot read the module's, nor the module the
//     script's), and each process limits with its own until the deploy ends;
//   - the server's clock decides, read once per call; times come back in milliseconds;
//   - a Limit with a Rate, Burst or Period below 1, or a negative n, is an error before any
//     call, where the script divides by zero or gives tokens back.
package redis_rate //nolint:revive // the package's name is redis_rate's own

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisratelimit/ratelimit"
)

// keyPrefix is where the limiter's keys live: apart from the script's "rate:".
const keyPrefix = "rl:rate:"

type rediser interface {
	Do(ctx context.Context, args ...any) *redis.Cmd
	Del(ctx context.Context, keys ...string) *redis.IntCmd
}

// Limit is Rate events per Period, in bursts of up to Burst.
type Limit struct {
	Rate   int
	Burst  int
	Period time.Duration
}

func (l Limit) String() string {
	return fmt.Sprintf("%d req/%s (burst %d)", l.Rate, fmtDur(l.Period), l.Burst)
}

// IsZero says whether l is the zero Limit.
func (l Limit) IsZero() bool {
	return l == Limit{}
}

func fmtDur(d time.Duration) string {
	switch d {
	case time.Second:
		return "s"
	case time.Minute:
		return "m"
	case time.Hour:
		return "h"
	}
	return d.String()
}

// PerSecond is rate events a second, in bursts of rate.
func PerSecond(rate int) Limit {
	return Limit{Rate: rate, Period: time.Second, Burst: rate}
}

// PerMinute is rate events a minute, in bursts of rate.
func PerMinute(rate int) Limit {
	return Limit{Rate: rate, Period: time.Minute, Burst: rate}
}

// PerHour is rate events an hour, in bursts of rate.
func PerHour(rate int) Limit {
	return Limit{Rate: rate, Period: time.Hour, Burst: rate}
}

// Limiter decides events against Limits, one CL.THROTTLE each.
type Limiter struct {
	rdb rediser
}

// NewLimiter returns a new Limiter on rdb (a *redis.Client, *redis.ClusterClient or
// *redis.Ring).
func NewLimiter(rdb rediser) *Limiter {
	return &Limiter{rdb: rdb}
}

// Allow is a shortcut for AllowN(ctx, key, limit, 1).
func (l Limiter) Allow(ctx context.Context, key string, limit Limit) (*Result, error) {
	return l.AllowN(ctx, key, limit, 1)
}

// AllowN admits n events now, all or none.
func (l Limiter) AllowN(ctx context.Context, key string, limit Limit, n int) (*Result, error) {
	return l.take(ctx, key, limit, n, false)
}

// AllowAtMost admits what fits of n events now, at least 1 (Result.Allowed says how many), or
// none.
func (l Limiter) AllowAtMost(ctx context.Context, key string, limit Limit, n int) (*Result, error) {
	return l.take(ctx, key, limit, n, true)
}

// Reset forgets key's usage: its next call starts from a full burst.
func (l *Limiter) Reset(ctx context.Context, key string) error {
	if l.rdb == nil {
		return fmt.Errorf("%w: NewLimiter was given no client", ratelimit.ErrInvalid)
	}
	return l.rdb.Del(ctx, keyPrefix+key).Err()
}

func (l Limiter) take(ctx context.Context, key string, limit Limit, n int, atMost bool) (*Result, error) {
	switch {
	case l.rdb == nil:
		return nil, fmt.Errorf("%w: NewLimiter was given no client", ratelimit.ErrInvalid)
	case limit.Rate < 1 || limit.Burst < 1 || limit.Period <= 0:
		return nil, fmt.Errorf("%w: a Limit's Rate, Burst and Period are positive: %v", ratelimit.ErrInvalid, limit)
	case n < 0:
		return nil, fmt.Errorf("%w: n is at least 0, not %d", ratelimit.ErrInvalid, n)
	}
	limiters := []ratelimit.Limiter{ratelimit.Throttle{
		Key: keyPrefix + key, MaxBurst: int64(limit.Burst - 1), Count: int64(limit.Rate), Period: limit.Period,
	}}
	opts := []ratelimit.Option{ratelimit.Quantity(int64(n))}
	if atMost {
		opts = append(opts, ratelimit.AtMost())
	}
	words, err := ratelimit.Command(limiters, opts...)
	if err != nil {
		return nil, err
	}
	args := make([]any, len(words))
	for index, word := range words {
		args[index] = word
	}
	reply, err := l.rdb.Do(ctx, args...).Result()
	if err != nil {
		return nil, err
	}
	got, err := ratelimit.ReadResult(reply, limiters, opts...)
	if err != nil {
		return nil, err
	}
	res := &Result{Limit: limit, RetryAfter: -1, ResetAfter: got.ResetAfter}
	switch {
	case got.Allowed && atMost:
		res.Allowed, res.Remaining = int(got.Granted), int(got.Remaining)
	case got.Allowed:
		res.Allowed, res.Remaining = n, int(got.Remaining)
	case got.RetryAfter >= 0:
		res.RetryAfter = got.RetryAfter
	default:
		// It can never fit: the script's wait, the limiter full again and n's excess over it.
		emission := limit.Period / time.Duration(limit.Rate)
		res.RetryAfter = got.ResetAfter + time.Duration(n-limit.Burst)*emission
	}
	return res, nil
}

// Result is what a call answered.
type Result struct {
	// Limit is the Limit the call was decided by.
	Limit Limit
	// Allowed is how many events were admitted: n or 0, or with AllowAtMost what fitted.
	Allowed int
	// Remaining is how many more events would be admitted at once, right after this call.
	Remaining int
	// RetryAfter is how long until a refused call fits; -1 when admitted.
	RetryAfter time.Duration
	// ResetAfter is how long until the key is back to a full burst (Remaining equal to Burst).
	ResetAfter time.Duration
}
