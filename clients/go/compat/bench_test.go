package compat

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	original "github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	zerolimit "github.com/zeromicro/go-zero/core/limit"

	"github.com/redisratelimit/ratelimit"
	"github.com/redisratelimit/ratelimit/gozero/limit"
	"github.com/redisratelimit/ratelimit/redis_rate"
)

// serverMicros reports the server's time per decision: INFO commandstats' usec over the calls
// of commands (reset before the loop), as server-µs/op.
func serverMicros(b *testing.B, rdb *redis.Client, commands ...string) {
	b.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var usec, calls float64
	for _, line := range strings.Split(info, "\n") {
		name, stats, found := strings.Cut(strings.TrimSpace(line), ":")
		if !found {
			continue
		}
		for _, command := range commands {
			if name != "cmdstat_"+command {
				continue
			}
			for _, field := range strings.Split(stats, ",") {
				key, value, _ := strings.Cut(field, "=")
				number, _ := strconv.ParseFloat(value, 64)
				switch key {
				case "usec":
					usec += number
				case "calls":
					calls += number
				}
			}
		}
	}
	if calls > 0 {
		b.ReportMetric(usec/float64(b.N), "server-µs/op")
	}
}

func reset(b *testing.B, rdb *redis.Client) {
	if err := rdb.ConfigResetStat(context.Background()).Err(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
}

// BenchmarkDecision is one decision on one key, every limit far above the load, one goroutine:
// the package's client and its drop-ins against go-redis/redis_rate's and go-zero's own scripts,
// on the same server (make bench runs it with REDIS_URL set).
func BenchmarkDecision(b *testing.B) {
	rdb := server(b)
	ctx := context.Background()
	b.Run("client-check", func(b *testing.B) {
		client, err := ratelimit.NewClient(rdb)
		if err != nil {
			b.Fatal(err)
		}
		limits := []ratelimit.Limiter{ratelimit.Throttle{Key: unique("bench"), MaxBurst: 1 << 30, Count: 1 << 30, Period: time.Second}}
		reset(b, rdb)
		for b.Loop() {
			if _, err := client.Check(ctx, limits); err != nil {
				b.Fatal(err)
			}
		}
		serverMicros(b, rdb, "cl.throttle")
	})
	b.Run("redis_rate-script", func(b *testing.B) {
		limiter, key := original.NewLimiter(rdb), unique("bench")
		if _, err := limiter.Allow(ctx, key, original.PerSecond(1<<30)); err != nil { // loads the script
			b.Fatal(err)
		}
		reset(b, rdb)
		for b.Loop() {
			if _, err := limiter.Allow(ctx, key, original.PerSecond(1<<30)); err != nil {
				b.Fatal(err)
			}
		}
		serverMicros(b, rdb, "evalsha", "eval")
	})
	b.Run("redis_rate-drop-in", func(b *testing.B) {
		limiter, key := redis_rate.NewLimiter(rdb), unique("bench")
		reset(b, rdb)
		for b.Loop() {
			if _, err := limiter.Allow(ctx, key, redis_rate.PerSecond(1<<30)); err != nil {
				b.Fatal(err)
			}
		}
		serverMicros(b, rdb, "cl.throttle")
	})
	store := zeroStore(b)
	b.Run("go-zero-TokenLimiter-script", func(b *testing.B) {
		limiter := zerolimit.NewTokenLimiter(1<<30, 1<<30, store, unique("bench"))
		limiter.Allow()
		reset(b, rdb)
		for b.Loop() {
			limiter.Allow()
		}
		serverMicros(b, rdb, "evalsha", "eval")
	})
	b.Run("go-zero-TokenLimiter-drop-in", func(b *testing.B) {
		limiter := limit.NewTokenLimiter(1<<30, 1<<30, store, unique("bench"))
		reset(b, rdb)
		for b.Loop() {
			limiter.Allow()
		}
		serverMicros(b, rdb, "cl.throttle")
	})
}
