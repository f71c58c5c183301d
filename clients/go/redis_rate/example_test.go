package redis_rate_test

import (
	"context"
	"fmt"
	"log"

	"github.com/redis/go-redis/v9"

	"github.com/redisratelimit/ratelimit/redis_rate" // was github.com/go-redis/redis_rate/v10
)

func ExampleNewLimiter() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	limiter := redis_rate.NewLimiter(rdb)
	res, err := limiter.Allow(ctx, "project:123", redis_rate.PerSecond(10))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("allowed", res.Allowed, "remaining", res.Remaining)
}
