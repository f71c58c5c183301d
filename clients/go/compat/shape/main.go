// Command shape is bench/overload.py's Go service: a net/http service on one core
// (GOMAXPROCS=1), each request burning CPU_MS of CPU, protected as clients/go/README.md shows
// with every option at its default:
//
//	http.ListenAndServe(addr, load.Middleware(shedder, nil)(mux))
//
// or by the package's fixed limit (one GCRA key at the capacity), or by nothing, or by go-zero's
// adaptive shedder as go-zero's rest server mounts it (load.NewAdaptiveShedder() with its
// defaults, under rest/handler.SheddingHandler).
//
//	shape PORT REDIS_URL MODE CPU_MS [CAPACITY]
package main

import (
	"encoding/json"
	"fmt"
	"log"
	"log/slog"
	"math"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	zeroload "github.com/zeromicro/go-zero/core/load"
	"github.com/zeromicro/go-zero/core/logx"
	"github.com/zeromicro/go-zero/core/stat"
	"github.com/zeromicro/go-zero/rest/handler"

	"github.com/redisratelimit/ratelimit"
	"github.com/redisratelimit/ratelimit/httprate"
	"github.com/redisratelimit/ratelimit/load"
)

// work is n rounds of arithmetic, and their result (read, so that it is not optimised away).
func work(n int) float64 {
	x := 1.0
	for i := 0; i < n; i++ {
		x = math.Sqrt(x + float64(i))
	}
	return x
}

// roundsPerMilli is how many rounds take a millisecond of CPU, measured at the start. It reads
// each result as the handler does: a result nobody reads lets the compiler drop the work, and the
// calibration then counted 16 times the rounds a millisecond really takes.
func roundsPerMilli() int {
	rounds := 1 << 16
	for {
		started := time.Now()
		if work(rounds) < 0 {
			log.Fatal("a square root came out negative")
		}
		took := time.Since(started)
		if took > 50*time.Millisecond {
			return int(float64(rounds) / (float64(took) / float64(time.Millisecond)))
		}
		rounds *= 2
	}
}

func main() {
	if len(os.Args) < 5 {
		log.Fatal("shape PORT REDIS_URL MODE CPU_MS [CAPACITY]")
	}
	runtime.GOMAXPROCS(1)
	logx.Disable()
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})))
	port, url, mode := os.Args[1], os.Args[2], os.Args[3]
	cpuMs, err := strconv.ParseFloat(os.Args[4], 64)
	if err != nil {
		log.Fatal(err)
	}
	capacity := 0.0
	if len(os.Args) > 5 {
		capacity, _ = strconv.ParseFloat(os.Args[5], 64)
	}
	rounds := int(cpuMs * float64(roundsPerMilli()))
	options, err := redis.ParseURL(url)
	if err != nil {
		log.Fatal(err)
	}
	client, err := ratelimit.NewClient(redis.NewClient(options))
	if err != nil {
		log.Fatal(err)
	}
	var shedder *load.Shedder
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		if work(rounds) < 0 {
			w.WriteHeader(http.StatusInternalServerError)
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	var service http.Handler = mux
	switch mode {
	case "shed":
		shedder, err = load.NewShedder(client, "load:"+port)
		if err != nil {
			log.Fatal(err)
		}
		service = load.Middleware(shedder, nil)(mux)
	case "fixed":
		rate := max(1, int64(math.Round(capacity)))
		limits := []ratelimit.Limiter{ratelimit.Throttle{Key: "bench:capacity", MaxBurst: max(1, rate/10), Count: rate, Period: time.Second}}
		limit, err := httprate.Limit(client, limits, func(*http.Request) string { return ":all" })
		if err != nil {
			log.Fatal(err)
		}
		service = limit(mux)
	case "gozero":
		service = handler.SheddingHandler(zeroload.NewAdaptiveShedder(), stat.NewMetrics("bench"))(mux)
	case "none":
	default:
		log.Fatalf("unknown mode %q", mode)
	}
	outer := http.NewServeMux()
	outer.HandleFunc("GET /stats", func(w http.ResponseWriter, _ *http.Request) {
		counters := map[string]any{"changes": 0, "congestions": 0}
		if shedder != nil && shedder.Limit() != nil {
			changes, congestions := shedder.Limit().Changes()
			counters = map[string]any{
				"changes": changes, "congestions": congestions, "limit": shedder.Limit().Limit(),
				"congested": shedder.Limit().Congested(), "waited": shedder.Waited().Seconds(),
			}
		}
		_ = json.NewEncoder(w).Encode(counters)
	})
	outer.Handle("/", service)
	server := &http.Server{Addr: fmt.Sprintf("127.0.0.1:%s", port), Handler: outer, ReadHeaderTimeout: 10 * time.Second}
	log.Fatal(server.ListenAndServe())
}
