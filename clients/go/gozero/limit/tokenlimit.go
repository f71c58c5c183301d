package limit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	xrate "golang.org/x/time/rate"

	"github.com/redisratelimit/ratelimit"
)

const (
	tokenFormat  = "rl:{%s}.tokens"
	pingInterval = time.Millisecond * 100
)

// A TokenLimiter admits rate events a second, up to burst at once, on the server; while the
// server fails, in the process.
type TokenLimiter struct {
	rate           int
	burst          int
	store          Store
	tokenKey       string
	rescueLock     sync.Mutex
	redisAlive     atomic.Bool
	monitorStarted bool
	rescueLimiter  *xrate.Limiter
}

// NewTokenLimiter admits rate events a second on key, up to burst at once. A rate or burst
// below 1 admits nothing.
func NewTokenLimiter(rate, burst int, store Store, key string) *TokenLimiter {
	limiter := &TokenLimiter{
		rate:     rate,
		burst:    burst,
		store:    store,
		tokenKey: fmt.Sprintf(tokenFormat, key),
	}
	limiter.redisAlive.Store(true)
	if rate >= 1 {
		limiter.rescueLimiter = xrate.NewLimiter(xrate.Every(time.Second/time.Duration(rate)), burst)
	}
	return limiter
}

// Allow is AllowN(time.Now(), 1).
func (lim *TokenLimiter) Allow() bool {
	return lim.AllowN(time.Now(), 1)
}

// AllowCtx is AllowNCtx(ctx, time.Now(), 1).
func (lim *TokenLimiter) AllowCtx(ctx context.Context) bool {
	return lim.AllowNCtx(ctx, time.Now(), 1)
}

// AllowN reports whether n events may happen now (the server's clock decides; now is the
// in-process fallback's).
func (lim *TokenLimiter) AllowN(now time.Time, n int) bool {
	return lim.reserveN(context.Background(), now, n)
}

// AllowNCtx is AllowN within ctx: a call past its deadline, or cancelled, is refused.
func (lim *TokenLimiter) AllowNCtx(ctx context.Context, now time.Time, n int) bool {
	return lim.reserveN(ctx, now, n)
}

func (lim *TokenLimiter) reserveN(ctx context.Context, now time.Time, n int) bool {
	if lim.rescueLimiter == nil || lim.burst < 1 || n < 0 || lim.store == nil {
		return false
	}
	if !lim.redisAlive.Load() {
		return lim.rescueLimiter.AllowN(now, n)
	}
	limiters := []ratelimit.Limiter{ratelimit.Throttle{
		Key: lim.tokenKey, MaxBurst: int64(lim.burst - 1), Count: int64(lim.rate), Period: time.Second,
	}}
	result, err := run(ctx, lim.store, limiters, ratelimit.Quantity(int64(n)))
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		slog.Error("fail to use rate limiter", "error", err)
		return false
	}
	if err != nil {
		slog.Error("fail to use rate limiter, use in-process limiter for rescue", "error", err)
		lim.startMonitor()
		return lim.rescueLimiter.AllowN(now, n)
	}
	return result.Allowed
}

func (lim *TokenLimiter) startMonitor() {
	lim.rescueLock.Lock()
	defer lim.rescueLock.Unlock()
	if lim.monitorStarted {
		return
	}
	lim.monitorStarted = true
	lim.redisAlive.Store(false)
	go lim.waitForRedis()
}

func (lim *TokenLimiter) waitForRedis() {
	ticker := time.NewTicker(pingInterval)
	defer func() {
		ticker.Stop()
		lim.rescueLock.Lock()
		lim.monitorStarted = false
		lim.rescueLock.Unlock()
	}()
	for range ticker.C {
		ctx, cancel := context.WithTimeout(context.Background(), pingInterval)
		_, err := lim.store.DoCtx(ctx, "PING")
		cancel()
		if err == nil {
			lim.redisAlive.Store(true)
			return
		}
	}
}
