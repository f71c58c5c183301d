package compat

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/gorilla/mux"

	"github.com/redisratelimit/ratelimit"
	"github.com/redisratelimit/ratelimit/httprate"
	"github.com/redisratelimit/ratelimit/load"
)

// TestChiAndGorillaTakeTheMiddlewareAsTheyAre mounts the rate limit and load shedding with each
// router's own Use, over real HTTP: the third request of a key is refused with 429 and its
// fields; the load shedding before it admits what it should.
func TestChiAndGorillaTakeTheMiddlewareAsTheyAre(t *testing.T) {
	rdb := server(t)
	client, err := ratelimit.NewClient(rdb)
	if err != nil {
		t.Fatal(err)
	}
	shedder, err := load.NewShedder(client, unique("routers"), load.Manual())
	if err != nil {
		t.Fatal(err)
	}
	defer shedder.Close()
	hello := func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("hello")) }
	routers := map[string]func(func(http.Handler) http.Handler) http.Handler{
		"chi": func(limit func(http.Handler) http.Handler) http.Handler {
			router := chi.NewRouter()
			router.Use(load.Middleware(shedder, nil), limit)
			router.Get("/hello", hello)
			return router
		},
		"gorilla": func(limit func(http.Handler) http.Handler) http.Handler {
			router := mux.NewRouter()
			router.Use(load.Middleware(shedder, nil), limit)
			router.HandleFunc("/hello", hello)
			return router
		},
	}
	for name, build := range routers {
		limits := []ratelimit.Limiter{ratelimit.Throttle{Key: unique(name) + ":", MaxBurst: 1, Count: 1, Period: time.Minute}}
		limit, err := httprate.Limit(client, limits, httprate.KeyByIP)
		if err != nil {
			t.Fatal(err)
		}
		server := httptest.NewServer(build(limit))
		statuses := []int{}
		for range 3 {
			response, err := http.Get(server.URL + "/hello")
			if err != nil {
				t.Fatal(err)
			}
			_ = response.Body.Close()
			statuses = append(statuses, response.StatusCode)
			if response.Header.Get("RateLimit-Policy") != `"burst";q=2;w=120` {
				t.Fatalf("%s: fields %v", name, response.Header)
			}
		}
		server.Close()
		if statuses[0] != 200 || statuses[1] != 200 || statuses[2] != 429 {
			t.Fatalf("%s: %v", name, statuses)
		}
	}
}
