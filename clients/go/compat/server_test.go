package compat

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisratelimit/ratelimit/internal/testserver"
)

// server is a go-redis client on the server the tests run against (REDIS_URL, the module
// loaded: tests/clients.rs starts it), closed when the test ends.
func server(t testing.TB) *redis.Client {
	return testserver.Client(t)
}

// unique is a key of its own for one test.
func unique(name string) string {
	return testserver.Unique("compat:" + name)
}

// serverTime is the server's clock.
func serverTime(t testing.TB, rdb *redis.Client) time.Time {
	t.Helper()
	now, err := rdb.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return now
}
