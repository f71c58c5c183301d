package load_test

import (
	"log"
	"net/http"

	"github.com/redis/go-redis/v9"

	"github.com/redisratelimit/ratelimit"
	"github.com/redisratelimit/ratelimit/load"
)

func ExampleMiddleware() {
	client, err := ratelimit.NewClient(redis.NewClient(&redis.Options{Addr: "localhost:6379"}))
	if err != nil {
		log.Fatal(err)
	}
	shedder, err := load.NewShedder(client, "load:checkout") // reports every second until Close
	if err != nil {
		log.Fatal(err)
	}
	defer shedder.Close()
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	// X-Priority: critical_plus, critical, sheddable_plus or sheddable (none: sheddable).
	log.Fatal(http.ListenAndServe(":8080", load.Middleware(shedder, nil)(mux)))
}
