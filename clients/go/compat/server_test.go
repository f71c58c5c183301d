package compat

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// server is a go-redis client on the server the tests run against (REDIS_URL, the module
// loaded: tests/clients.rs starts it).
func server(t testing.TB) *redis.Client {
	t.Helper()
	url := os.Getenv("REDIS_URL")
	if url == "" {
		t.Fatal("REDIS_URL names the server with the module (make test sets it)")
	}
	options, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(options)
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// unique is a key of its own for one test.
func unique(name string) string {
	bytes := make([]byte, 8)
	_, _ = rand.Read(bytes)
	return "compat:" + name + ":" + hex.EncodeToString(bytes)
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
