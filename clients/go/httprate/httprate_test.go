package httprate_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisratelimit/ratelimit"
	"github.com/redisratelimit/ratelimit/httprate"
	"github.com/redisratelimit/ratelimit/internal/testserver"
)

func get(t *testing.T, url string, header map[string]string) (int, http.Header) {
	t.Helper()
	request, _ := http.NewRequest(http.MethodGet, url, nil)
	for name, value := range header {
		request.Header.Set(name, value)
	}
	response, err := http.DefaultClient.Do(request)
	if err != nil {
		t.Fatal(err)
	}
	_ = response.Body.Close()
	return response.StatusCode, response.Header
}

func TestSeveralLimitsInOneDecisionWith429AndTheFields(t *testing.T) {
	client, err := ratelimit.NewClient(testserver.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	prefix := testserver.Unique("http")
	limits := []ratelimit.Limiter{
		ratelimit.Throttle{Key: prefix + ":burst:", MaxBurst: 2, Count: 1, Period: time.Minute, Name: "burst"},
		ratelimit.Window{Key: prefix + ":day:", Limit: 1000, Window: 24 * time.Hour, Name: "day"},
	}
	limit, err := httprate.Limit(client, limits, httprate.KeyByHeader("X-API-Key"))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /", limit(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok"))
	})))
	server := httptest.NewServer(mux)
	defer server.Close()

	alice := map[string]string{"X-API-Key": "alice"}
	for request := 0; request < 3; request++ {
		status, header := get(t, server.URL, alice)
		want := `"burst";q=3;w=180, "day";q=1000;w=86400`
		if status != 200 || header.Get("RateLimit-Policy") != want {
			t.Fatalf("request %d: %d %q", request, status, header.Get("RateLimit-Policy"))
		}
	}
	status, header := get(t, server.URL, alice)
	if status != 429 || header.Get("Retry-After") == "" || !strings.Contains(header.Get("RateLimit"), `"burst";r=0`) {
		t.Fatalf("the fourth: %d %v", status, header)
	}
	if status, _ := get(t, server.URL, map[string]string{"X-API-Key": "bob"}); status != 200 {
		t.Fatalf("another key has its own limits: %d", status)
	}
	if status, header := get(t, server.URL, nil); status != 200 || header.Get("RateLimit") != "" {
		t.Fatalf("no key, no limit: %d %v", status, header)
	}
	// The day's limit was charged only for what the burst admitted: 3 of alice's 4.
	counts, err := client.Counts(context.Background(), ratelimit.Keyed(limits, "alice")[1])
	if err != nil || counts.Current != 3 {
		t.Fatalf("the day counts %+v (%v)", counts, err)
	}
}

func TestAFrozenServerAnswers503UnderRaiseAndDenyAndPassesUnderAllow(t *testing.T) {
	proxy := testserver.NewFrozenProxy(t)
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	limits := []ratelimit.Limiter{ratelimit.Throttle{Key: testserver.Unique("frozen") + ":", MaxBurst: 9, Count: 10, Period: time.Second}}
	mux := http.NewServeMux()
	for _, policy := range []ratelimit.OnError{ratelimit.Raise, ratelimit.Allow, ratelimit.Deny} {
		client, err := ratelimit.NewClient(rdb, ratelimit.WithOnError(policy), ratelimit.Timeout(100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		limit, err := httprate.Limit(client, limits, httprate.KeyByIP)
		if err != nil {
			t.Fatal(err)
		}
		mux.Handle("/"+policy.String(), limit(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, _ = w.Write([]byte("ok"))
		})))
	}
	server := httptest.NewServer(mux)
	defer server.Close()
	proxy.Freeze()
	defer proxy.Thaw()
	for policy, want := range map[string]int{"raise": 503, "allow": 200, "deny": 503} {
		status, header := get(t, server.URL+"/"+policy, nil)
		if status != want || (want == 503 && header.Get("Retry-After") == "") {
			t.Fatalf("%s: %d %v", policy, status, header)
		}
	}
}

func TestBadLimitsAreAnErrorBeforeAnyRequest(t *testing.T) {
	client, _ := ratelimit.NewClient(testserver.Client(t))
	if _, err := httprate.Limit(client, nil, httprate.KeyByIP); !errors.Is(err, ratelimit.ErrInvalid) {
		t.Fatalf("no limits: %v", err)
	}
	zero := []ratelimit.Limiter{ratelimit.Window{Key: "w:", Limit: 10}}
	if _, err := httprate.Limit(client, zero, httprate.KeyByIP); !errors.Is(err, ratelimit.ErrInvalid) {
		t.Fatalf("a zero window: %v", err)
	}
	if _, err := httprate.Limit(nil, zero, httprate.KeyByIP); !errors.Is(err, ratelimit.ErrInvalid) {
		t.Fatalf("no client: %v", err)
	}
}
