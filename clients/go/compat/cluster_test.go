package compat

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	zeroredis "github.com/zeromicro/go-zero/core/stores/redis"

	"github.com/redisratelimit/ratelimit"
	"github.com/redisratelimit/ratelimit/gozero/limit"
	"github.com/redisratelimit/ratelimit/load"
	"github.com/redisratelimit/ratelimit/redis_rate"
)

// TestOnACluster runs the client, the drop-ins and a shedder on a Cluster (REDIS_CLUSTER_URL: one
// of its nodes; the repository's tests/clients.rs starts a three-primary one, RL.TOP on, and runs
// this test alone): keys in every slot range, several limiters in one hash slot, a lease, the
// shared lists' transaction, top keys merged over the primaries.
func TestOnACluster(t *testing.T) {
	url := os.Getenv("REDIS_CLUSTER_URL")
	if url == "" {
		t.Skip("REDIS_CLUSTER_URL names a node of a Cluster (tests/clients.rs's every_package_works_on_a_cluster)")
	}
	options, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{options.Addr}})
	defer func() { _ = rdb.Close() }()
	client, err := ratelimit.NewClient(rdb)
	if err != nil {
		t.Fatal(err)
	}
	run := unique("cluster")
	for index := range 30 {
		limits := []ratelimit.Limiter{ratelimit.Log{Key: fmt.Sprintf("%s:%d", run, index), Limit: 1, Window: time.Minute}}
		first, err1 := client.Check(ctx, limits)
		second, err2 := client.Check(ctx, limits)
		if err1 != nil || err2 != nil || !first.Allowed || second.Allowed {
			t.Fatalf("key %d: %+v %v, %+v %v", index, first, err1, second, err2)
		}
	}
	tag := "{" + run + "}"
	both := []ratelimit.Limiter{
		ratelimit.Log{Key: tag + ":a", Limit: 2, Window: time.Minute},
		ratelimit.Throttle{Key: tag + ":b", Count: 1, Period: time.Minute},
	}
	if first, err := client.Check(ctx, both); err != nil || !first.Allowed {
		t.Fatalf("RL.ALL: %+v %v", first, err)
	}
	if second, err := client.Check(ctx, both); err != nil || second.Allowed {
		t.Fatalf("RL.ALL, the second: %+v %v", second, err)
	}
	lease, err := client.AcquireLease(ctx, run+":lease", 1, time.Minute, 1)
	if err != nil || !lease.Allowed {
		t.Fatalf("lease: %+v %v", lease, err)
	}
	if released, err := client.ReleaseLease(ctx, run+":lease", lease.ID); !released || err != nil {
		t.Fatalf("release: %v", err)
	}
	lists, err := ratelimit.NewSharedLists(client, run+":lists", time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if err := lists.Add(ctx, "allow", "svc-a", "1"); err != nil {
		t.Fatal(err)
	}
	if found, err := lists.Contains(ctx, "allow", "svc-a"); !found || err != nil {
		t.Fatalf("the lists: %v %v", found, err)
	}
	top, err := client.Top(ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	refused := 0
	for _, row := range top {
		if strings.HasPrefix(row.Key, run+":") && !strings.Contains(row.Key, "lease") {
			refused++
		}
	}
	if refused < 30 {
		t.Fatalf("the 30 keys refused, over the primaries: %d in %+v", refused, top)
	}

	// The drop-ins route by go-redis' and go-zero's own cluster clients.
	limiter := redis_rate.NewLimiter(rdb)
	for index := range 30 {
		res, err := limiter.Allow(ctx, fmt.Sprintf("%s:rate:%d", run, index), redis_rate.PerMinute(1))
		if err != nil || res.Allowed != 1 {
			t.Fatalf("redis_rate, key %d: %+v %v", index, res, err)
		}
	}
	store, err := zeroredis.NewRedis(zeroredis.RedisConf{Host: options.Addr, Type: zeroredis.ClusterType})
	if err != nil {
		t.Fatal(err)
	}
	period := limit.NewPeriodLimit(60, 1, store, run+":period:")
	for index := range 30 {
		key := fmt.Sprint(index)
		first, err1 := period.Take(key)
		second, err2 := period.Take(key)
		if err1 != nil || err2 != nil || first != limit.HitQuota || second != limit.OverQuota {
			t.Fatalf("PeriodLimit, key %d: %d %v, %d %v", index, first, err1, second, err2)
		}
	}
	shedder, err := load.NewShedder(client, run+":load", load.Manual())
	if err != nil {
		t.Fatal(err)
	}
	if standing, err := shedder.Report(ctx); err != nil || standing.Instances != 1 {
		t.Fatalf("a report: %+v %v", standing, err)
	}
}
