package httprate_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisratelimit/ratelimit"
	"github.com/redisratelimit/ratelimit/httprate"
	"github.com/redisratelimit/ratelimit/internal/testserver"
	"github.com/redisratelimit/ratelimit/load"
)

type phase int32

const (
	before phase = iota
	frozen
	back
)

type answer struct {
	phase  phase
	path   string
	status int
}

// Issue 58: a 5 s outage of the server under a service with the rate limit and load shedding at
// their defaults (and under Deny) sheds nothing once the server is back: the limiter's own
// answers while it failed (its 503s) are not the service failing. What is asserted is what the
// server reports (the service's level, polled on a connection of the test's own, not through
// the proxy) and what the service answered.
func TestAnOutageOfTheServerShedsNothingOnceItIsBack(t *testing.T) {
	for _, policy := range []ratelimit.OnError{ratelimit.Raise, ratelimit.Deny} {
		t.Run(policy.String(), func(t *testing.T) {
			t.Parallel()
			outage(t, policy)
		})
	}
}

func outage(t *testing.T, policy ratelimit.OnError) {
	direct := testserver.Client(t)
	ctx := context.Background()
	proxy := testserver.NewFrozenProxy(t)
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	service := testserver.Unique("outage")

	// The service as the README sets it up.
	client, err := ratelimit.NewClient(rdb, ratelimit.WithOnError(policy))
	if err != nil {
		t.Fatal(err)
	}
	shedder, err := load.NewShedder(client, service)
	if err != nil {
		t.Fatal(err)
	}
	defer shedder.Close()
	limits := []ratelimit.Limiter{ratelimit.Throttle{Key: service + ":limited:", MaxBurst: 99, Count: 100, Period: time.Second}}
	limit, err := httprate.Limit(client, limits, func(r *http.Request) string {
		if r.URL.Path == "/limited" {
			return "everyone"
		}
		return ""
	})
	if err != nil {
		t.Fatal(err)
	}
	okay := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	server := httptest.NewServer(load.Middleware(shedder, nil)(limit(okay)))
	defer server.Close()

	instances := func() (level, reporting int64) {
		status, err := direct.Do(ctx, "RL.LOAD.STATUS", service).Slice()
		if err != nil {
			t.Error(err)
			return 0, 0
		}
		return status[1].(int64), status[5].(int64)
	}

	var at atomic.Int32
	var mu sync.Mutex
	var answers []answer
	var running atomic.Bool
	running.Store(true)
	var senders sync.WaitGroup
	senders.Add(1)
	go func() { // 30 requests a second, over /limited and /open in turn
		defer senders.Done()
		for number := 0; running.Load(); number++ {
			path := []string{"/limited", "/open"}[number%2]
			sent := phase(at.Load())
			senders.Add(1)
			go func() {
				defer senders.Done()
				status := 0
				if response, err := http.Get(server.URL + path); err == nil {
					status = response.StatusCode
					_ = response.Body.Close()
				}
				mu.Lock()
				answers = append(answers, answer{sent, path, status})
				mu.Unlock()
			}()
			time.Sleep(33 * time.Millisecond)
		}
	}()
	for poll := 0; poll < 100; poll++ {
		if _, reporting := instances(); reporting > 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, reporting := instances(); reporting == 0 {
		t.Fatal("the service reports before the outage")
	}
	time.Sleep(2 * time.Second)
	at.Store(int32(frozen))
	proxy.Freeze()
	time.Sleep(5 * time.Second)
	proxy.Thaw()
	at.Store(int32(back))
	var highest int64
	reported := false
	for range 40 {
		level, reporting := instances()
		highest = max(highest, level)
		reported = reported || reporting > 0
		time.Sleep(100 * time.Millisecond)
	}
	running.Store(false)
	senders.Wait()

	statuses := func(when phase, path string) map[int]int {
		counted := map[int]int{}
		for _, one := range answers {
			if one.phase == when && one.path == path {
				counted[one.status]++
			}
		}
		return counted
	}
	if got := statuses(frozen, "/limited"); got[503] == 0 {
		t.Errorf("/limited answered %v while frozen", got)
	}
	for _, when := range []phase{before, frozen, back} {
		if got := statuses(when, "/open"); len(got) != 1 || got[200] == 0 {
			t.Errorf("/open answered %v (phase %d)", got, when)
		}
	}
	if !reported {
		t.Error("no report after the outage")
	}
	if highest != 0 {
		t.Errorf("the level rose to %d after the outage", highest)
	}
	if got := statuses(back, "/limited"); got[200] == 0 {
		t.Errorf("/limited answered %v after", got)
	}
}
