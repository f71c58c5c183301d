package ratelimit_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisratelimit/ratelimit"
	"github.com/redisratelimit/ratelimit/internal/testserver"
)

// clock is a time the test moves.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// behind is a go-redis client on a proxy that can freeze, with go-redis' own timeouts long:
// only the package's deadline ends a call.
func behind(t *testing.T, proxy *testserver.FrozenProxy, deadlines bool) *redis.Client {
	rdb := redis.NewClient(&redis.Options{
		Addr: proxy.Addr(), ReadTimeout: time.Minute, WriteTimeout: time.Minute,
		ContextTimeoutEnabled: deadlines,
	})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

func TestAFrozenServerCostsTheDeadlineThenThePolicyDecides(t *testing.T) {
	limiter := one(ratelimit.Throttle{Key: testserver.Unique("frozen"), MaxBurst: 9, Count: 1, Period: time.Second})
	for _, deadlines := range []bool{false, true} {
		proxy := testserver.NewFrozenProxy(t)
		rdb := behind(t, proxy, deadlines)
		raise := newClient(t, rdb, ratelimit.Timeout(200*time.Millisecond))
		allow := newClient(t, rdb, ratelimit.Timeout(200*time.Millisecond), ratelimit.WithOnError(ratelimit.Allow))
		deny := newClient(t, rdb, ratelimit.Timeout(time.Hour), ratelimit.WithOnError(ratelimit.Deny), ratelimit.Cooldown(3*time.Second))
		check(t, raise, limiter) // connected
		proxy.Freeze()

		// The client's deadline ends the call: the error says the server failed.
		_, err := raise.Check(context.Background(), limiter)
		var down *ratelimit.ServerUnavailableError
		if !errors.As(err, &down) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("go-redis deadlines %v: %v", deadlines, err)
		}
		if allowed := check(t, allow, limiter); !allowed.Allowed || !allowed.Failed {
			t.Fatalf("allow: %+v", allowed)
		}
		// The context's deadline ends it too, the client's being an hour.
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		denied, err := deny.Check(ctx, limiter)
		cancel()
		if err != nil || denied.Allowed || !denied.Failed || denied.RetryAfter <= 0 || denied.RetryAfter > 3*time.Second {
			t.Fatalf("deny: %+v %v", denied, err)
		}
		// Within the cool-down, nothing is asked: the answer says when the server was last seen.
		_, err = raise.Check(context.Background(), limiter)
		if !errors.As(err, &down) || !strings.Contains(err.Error(), "failed less than") {
			t.Fatalf("within the cool-down: %v", err)
		}
		proxy.Thaw()
	}
}

func TestAfterTheCooldownOneCallProbesWhileTheOthersKeepThePolicy(t *testing.T) {
	proxy := testserver.NewFrozenProxy(t)
	rdb := behind(t, proxy, false)
	now := &clock{now: time.Unix(1_800_000_000, 0)}
	client := newClient(t, rdb, ratelimit.Timeout(time.Hour), ratelimit.WithOnError(ratelimit.Deny), ratelimit.WithClock(now.Now))
	limiter := one(ratelimit.Throttle{Key: testserver.Unique("probe"), MaxBurst: 99, Count: 1, Period: time.Second})
	check(t, client, limiter)
	proxy.Freeze()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	if failed, _ := client.Check(ctx, limiter); !failed.Failed {
		t.Fatalf("the first call fails: %+v", failed)
	}
	cancel()
	now.Advance(2 * time.Second)
	// Of ten calls at once, one is the probe: it waits on the frozen server while the nine others
	// keep the policy.
	results := make(chan ratelimit.Result, 10)
	for range 10 {
		go func() {
			result, _ := client.Check(context.Background(), limiter)
			results <- result
		}()
	}
	for range 9 {
		if other := <-results; other.Allowed || !other.Failed {
			t.Fatalf("while the probe is out: %+v", other)
		}
	}
	select {
	case result := <-results:
		t.Fatalf("the probe answered while the server was frozen: %+v", result)
	default:
	}
	proxy.Thaw()
	if result := <-results; !result.Allowed || result.Failed {
		t.Fatalf("the probe finds the server back: %+v", result)
	}
	if result := check(t, client, limiter); !result.Allowed || result.Failed {
		t.Fatalf("the circuit is closed: %+v", result)
	}
}

func TestServiceResumesOnceTheServerDoes(t *testing.T) {
	proxy := testserver.NewFrozenProxy(t)
	rdb := behind(t, proxy, true)
	now := &clock{now: time.Unix(1_800_000_000, 0)}
	client := newClient(t, rdb, ratelimit.Timeout(100*time.Millisecond), ratelimit.WithClock(now.Now))
	limiter := one(ratelimit.Window{Key: testserver.Unique("resume"), Limit: 100, Window: time.Minute})
	check(t, client, limiter)
	proxy.Freeze()
	if _, err := client.Check(context.Background(), limiter); err == nil {
		t.Fatal("a frozen server fails the call under Raise")
	}
	proxy.Thaw()
	now.Advance(time.Second)
	// The connection the deadline ended is dropped; the probe dials again.
	result := check(t, client, limiter)
	if !result.Allowed || result.Remaining > 98 {
		t.Fatalf("served again, the request before the outage counted: %+v", result)
	}
}
