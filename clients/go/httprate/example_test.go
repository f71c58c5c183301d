package httprate_test

import (
	"log"
	"net/http"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisratelimit/ratelimit"
	"github.com/redisratelimit/ratelimit/httprate"
)

func ExampleLimit() {
	client, err := ratelimit.NewClient(redis.NewClient(&redis.Options{Addr: "localhost:6379"}))
	if err != nil {
		log.Fatal(err)
	}
	limits := []ratelimit.Limiter{ // each Key a prefix: the request's key goes after it
		ratelimit.Throttle{Key: "api:burst:", MaxBurst: 9, Count: 5, Period: time.Second, Name: "burst"},
		ratelimit.Window{Key: "api:hour:", Limit: 1000, Window: time.Hour, Name: "hour"},
	}
	limit, err := httprate.Limit(client, limits, httprate.KeyByHeader("X-API-Key"))
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /hello", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("hello")) })
	log.Fatal(http.ListenAndServe(":8080", limit(mux))) // chi: router.Use(limit); gorilla: router.Use(limit)
}
