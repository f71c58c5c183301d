package compat

import (
	"fmt"
	"log"

	"github.com/zeromicro/go-zero/core/stores/redis"

	"github.com/redisratelimit/ratelimit/gozero/limit" // was github.com/zeromicro/go-zero/core/limit
)

func Example_goZero() {
	store := redis.MustNewRedis(redis.RedisConf{Host: "localhost:6379", Type: redis.NodeType})
	// 5 an hour per key; with limit.Align(), from one local hour to the next.
	period := limit.NewPeriodLimit(3600, 5, store, "sms:")
	code, err := period.Take("user:7")
	if err != nil {
		log.Fatal(err)
	}
	switch code {
	case limit.Allowed, limit.HitQuota:
		fmt.Println("send")
	case limit.OverQuota:
		fmt.Println("over quota")
	}
	tokens := limit.NewTokenLimiter(100, 200, store, "api") // 100 a second, 200 at once
	if !tokens.Allow() {
		fmt.Println("refused")
	}
}
