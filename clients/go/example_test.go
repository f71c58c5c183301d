package ratelimit_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/redisratelimit/ratelimit"
)

func ExampleClient_Check() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	limiter, err := ratelimit.NewClient(rdb)
	if err != nil {
		log.Fatal(err)
	}
	// 30 a minute, 15 at once (GCRA: CL.THROTTLE, as redis-cell).
	user := []ratelimit.Limiter{ratelimit.Throttle{Key: "user:7", MaxBurst: 14, Count: 30, Period: time.Minute}}
	result, err := limiter.Check(ctx, user)
	if err != nil {
		log.Fatal(err) // the server failed (Raise), or refused the call
	}
	if !result.Allowed {
		fmt.Println("refused: retry in", result.RetryAfter)
	}
	fmt.Println(ratelimit.Fields(result, user)) // the IETF RateLimit fields
}

func ExampleClient_Check_several() {
	ctx := context.Background()
	limiter, err := ratelimit.NewClient(redis.NewClient(&redis.Options{Addr: "localhost:6379"}))
	if err != nil {
		log.Fatal(err)
	}
	limits := []ratelimit.Limiter{ // one call, RL.ALL: all or nothing (one hash tag on a Cluster)
		ratelimit.Throttle{Key: "{user:7}:burst", MaxBurst: 4, Count: 1, Period: time.Second, Name: "burst"},
		ratelimit.Window{Key: "{user:7}:day", Limit: 1000, Window: 24 * time.Hour, Name: "day"},
		ratelimit.Log{Key: "{user:7}:login", Limit: 3, Window: time.Minute, Name: "login"},
	}
	result, err := limiter.Check(ctx, limits, ratelimit.Quantity(2), ratelimit.Delay(time.Second))
	if err != nil {
		log.Fatal(err)
	}
	if result.Allowed {
		time.Sleep(result.Wait) // Delay: its turn, up to a second away
	}
	for index, each := range result.Each {
		fmt.Println(index, each.Remaining)
	}
}

func ExampleNewClient() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	limiter, err := ratelimit.NewClient(rdb,
		ratelimit.Timeout(50*time.Millisecond), // the most a call waits (1 s)
		ratelimit.WithOnError(ratelimit.Allow), // while the server fails (Raise)
		ratelimit.DenyCache(10_000),            // standing refusals answered here
		ratelimit.WithMetrics(ratelimit.NewPrometheusMetrics(prometheus.DefaultRegisterer)),
	)
	if err != nil {
		log.Fatal(err)
	}
	_ = limiter
}

func ExampleNewQuota() {
	ctx := context.Background()
	limiter, err := ratelimit.NewClient(redis.NewClient(&redis.Options{Addr: "localhost:6379"}))
	if err != nil {
		log.Fatal(err)
	}
	// One hot limit, 100,000 a second across the fleet: each process takes 500 at a time.
	hot := []ratelimit.Limiter{ratelimit.Window{Key: "api:global", Limit: 100_000, Window: time.Second}}
	quota, err := ratelimit.NewQuota(limiter, hot, 500, 100*time.Millisecond)
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = quota.Close(ctx) }() // gives back what is held
	if ok, err := quota.Take(ctx, 1); err == nil && !ok {
		fmt.Println("refused")
	}
}

func ExampleClient_Top() {
	ctx := context.Background()
	limiter, err := ratelimit.NewClient(redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"localhost:7000"}}))
	if err != nil {
		log.Fatal(err)
	}
	top, err := limiter.Top(ctx, 10) // every primary's, merged
	if err != nil {
		log.Fatal(err) // RL.TOP is off until CONFIG SET ratelimit.top-keys 128
	}
	for _, row := range top {
		fmt.Println(row.Key, row.Refusals)
	}
}
