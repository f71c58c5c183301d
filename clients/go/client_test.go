package ratelimit_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/redisratelimit/ratelimit"
	"github.com/redisratelimit/ratelimit/internal/testserver"
)

const minute = time.Minute

func newClient(t *testing.T, rdb redis.UniversalClient, opts ...ratelimit.ClientOption) *ratelimit.Client {
	t.Helper()
	client, err := ratelimit.NewClient(rdb, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

func check(t *testing.T, client *ratelimit.Client, limiters []ratelimit.Limiter, opts ...ratelimit.Option) ratelimit.Result {
	t.Helper()
	result, err := client.Check(context.Background(), limiters, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return result
}

func one(limiter ratelimit.Limiter) []ratelimit.Limiter { return []ratelimit.Limiter{limiter} }

func TestEveryLimiterAndOptionOnTheServer(t *testing.T) {
	client := newClient(t, testserver.Client(t))
	ctx := context.Background()
	burst := one(ratelimit.Throttle{Key: testserver.Unique("throttle"), MaxBurst: 4, Count: 1, Period: minute})
	for request := int64(0); request < 5; request++ {
		admitted := check(t, client, burst)
		if !admitted.Allowed || admitted.Limit != 5 || admitted.Remaining != 4-request || admitted.RetryAfter != -1 {
			t.Fatalf("request %d: %+v", request, admitted)
		}
	}
	refused := check(t, client, burst)
	if refused.Allowed || refused.RetryAfter < 55*time.Second {
		t.Fatalf("the sixth: %+v", refused)
	}
	if peeked, err := client.Peek(ctx, burst, 1); err != nil || peeked.Allowed {
		t.Fatalf("a peek answers as a check would: %+v %v", peeked, err)
	}
	// A refund gives back what a request took.
	if !check(t, client, burst, ratelimit.Refund()).Allowed || !check(t, client, burst).Allowed {
		t.Fatal("a refund gives back one request")
	}

	// Several limits, all or nothing: the day's limit is charged only with the burst's.
	tag := "{" + testserver.Unique("all") + "}"
	both := []ratelimit.Limiter{
		ratelimit.Throttle{Key: tag + ":burst", MaxBurst: 1, Count: 1, Period: time.Second, Name: "burst"},
		ratelimit.Window{Key: tag + ":day", Limit: 1000, Window: 24 * time.Hour, Algorithm: ratelimit.Fixed, Name: "day"},
	}
	result := check(t, client, both)
	if !result.Allowed || len(result.Each) != 2 || result.Each[1].Remaining != 999 {
		t.Fatalf("both: %+v", result)
	}
	if policy := ratelimit.Fields(result, both)["RateLimit-Policy"]; policy != `"burst";q=2;w=2, "day";q=1000;w=86400` {
		t.Fatalf("RateLimit-Policy: %s", policy)
	}

	// Delay: the request waits its turn; AtMost: what fits; Force: owed.
	slow := one(ratelimit.Throttle{Key: testserver.Unique("delay"), Count: 1, Period: 10 * time.Second})
	check(t, client, slow)
	if waits := check(t, client, slow, ratelimit.Delay(30*time.Second)); !waits.Allowed || waits.Wait < 9*time.Second {
		t.Fatalf("delayed: %+v", waits)
	}
	log := ratelimit.Log{Key: testserver.Unique("log"), Limit: 10, Window: minute}
	if some := check(t, client, one(log), ratelimit.Quantity(8), ratelimit.AtMost()); some.Granted != 8 {
		t.Fatalf("at most 8: %+v", some)
	}
	if rest := check(t, client, one(log), ratelimit.Quantity(8), ratelimit.AtMost()); rest.Granted != 2 {
		t.Fatalf("at most the 2 left: %+v", rest)
	}
	forced := one(ratelimit.Log{Key: testserver.Unique("force"), Limit: 10, Window: minute})
	if owed := check(t, client, forced, ratelimit.Quantity(15), ratelimit.Force()); !owed.Allowed {
		t.Fatalf("forced: %+v", owed)
	}

	// Block: a refusal keeps the key refused.
	blocked := one(ratelimit.Throttle{Key: testserver.Unique("block"), Count: 1, Period: minute})
	check(t, client, blocked)
	if penalty := check(t, client, blocked, ratelimit.Block(900*time.Second)); penalty.RetryAfter != 900*time.Second {
		t.Fatalf("blocked: %+v", penalty)
	}

	// Counts of a log and a window.
	if counts, err := client.Counts(ctx, log); err != nil || counts.Count != 10 {
		t.Fatalf("counts: %+v %v", counts, err)
	}
	window := ratelimit.Window{Key: testserver.Unique("window"), Limit: 5, Window: minute, Algorithm: ratelimit.Anchored}
	check(t, client, one(window), ratelimit.Quantity(3))
	if counts, err := client.Counts(ctx, window); err != nil || counts.Current != 3 {
		t.Fatalf("window counts: %+v %v", counts, err)
	}

	// Leases.
	exports := testserver.Unique("leases")
	lease, err := client.AcquireLease(ctx, exports, 1, 5*minute, 1)
	if err != nil || !lease.Allowed || lease.ID == 0 {
		t.Fatalf("lease: %+v %v", lease, err)
	}
	if second, _ := client.AcquireLease(ctx, exports, 1, 5*minute, 1); second.Allowed {
		t.Fatal("one slot")
	}
	if peeked, _ := client.PeekLease(ctx, exports, 1, 5*minute, 1); peeked.Allowed {
		t.Fatal("a peek answers as an acquire would")
	}
	if renewed, err := client.RenewLease(ctx, exports, lease.ID, minute); !renewed || err != nil {
		t.Fatalf("renew: %v", err)
	}
	if released, err := client.ReleaseLease(ctx, exports, lease.ID); !released || err != nil {
		t.Fatalf("release: %v", err)
	}
	if again, _ := client.ReleaseLease(ctx, exports, lease.ID); again {
		t.Fatal("released already")
	}

	// Slots in RL.ALL: a lease beside a rate, its id in the result.
	slotsTag := "{" + testserver.Unique("slots") + "}"
	slotted := check(t, client, []ratelimit.Limiter{
		ratelimit.Throttle{Key: slotsTag + ":rate", MaxBurst: 9, Count: 10, Period: time.Second},
		ratelimit.Slots{Key: slotsTag + ":slots", Limit: 2, Lease: minute},
	})
	if !slotted.Allowed || slotted.LeaseID <= 0 {
		t.Fatalf("slots: %+v", slotted)
	}
	if released, _ := client.ReleaseLease(ctx, slotsTag+":slots", slotted.LeaseID); !released {
		t.Fatal("the slot's lease is released")
	}

	// Acquire waits the turn the module gives.
	waited := one(ratelimit.Throttle{Key: testserver.Unique("acquire"), Count: 10, Period: time.Second})
	check(t, client, waited)
	if acquired, err := client.Acquire(ctx, waited, 1, time.Second); err != nil || !acquired.Allowed || acquired.Wait <= 0 {
		t.Fatalf("acquire: %+v %v", acquired, err)
	}
}

func TestTheLoadGateShedsWithNothingCharged(t *testing.T) {
	rdb := testserver.Client(t)
	client := newClient(t, rdb)
	ctx := context.Background()
	tag := "{" + testserver.Unique("gate") + "}"
	service := tag + ":load"
	if err := rdb.Do(ctx, "RL.LOAD.POLICY", service, "HOLD", "0", "LEVEL", "inflight", "0", "SHARES", "1", "1", "0", "0").Err(); err != nil {
		t.Fatal(err)
	}
	standing, err := client.ReportLoad(ctx, service, "a", minute, []ratelimit.Factor{{Name: "inflight", Value: 1}})
	if err != nil || standing.Level != 1 || standing.Share(ratelimit.Sheddable) != 0 {
		t.Fatalf("report: %+v %v", standing, err)
	}
	user := ratelimit.Throttle{Key: tag + ":user", MaxBurst: 4, Count: 1, Period: minute}
	admitted := check(t, client, []ratelimit.Limiter{ratelimit.Load{Key: service, Priority: ratelimit.Critical}, user})
	if !admitted.Allowed || admitted.ShedLevel != 0 {
		t.Fatalf("critical: %+v", admitted)
	}
	shed := check(t, client, []ratelimit.Limiter{ratelimit.Load{Key: service, Priority: ratelimit.Sheddable}, user})
	if shed.Allowed || shed.ShedLevel != 1 || shed.Remaining != 4 {
		t.Fatalf("sheddable is shed with nothing charged: %+v", shed)
	}
	policy, err := client.LoadPolicy(ctx, service)
	if err != nil || !strings.Contains(strings.Join(policy, " "), "LEVEL inflight 0 SHARES 1 1 0 0") {
		t.Fatalf("policy: %q %v", policy, err)
	}
}

func TestManyGoroutinesOnOneKeyAreCountedExactly(t *testing.T) {
	client := newClient(t, testserver.Client(t))
	log := ratelimit.Log{Key: testserver.Unique("goroutines"), Limit: 1000, Window: minute}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				if result, err := client.Check(context.Background(), one(log)); err == nil && result.Allowed {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	counts, err := client.Counts(context.Background(), log)
	if admitted.Load() != 1000 || err != nil || counts.Count != 1000 {
		t.Fatalf("1,600 requests against a limit of 1,000: %d admitted, %d counted (%v)", admitted.Load(), counts.Count, err)
	}
}

func TestTopKeysAreTheServersRefusals(t *testing.T) {
	rdb := testserver.Client(t)
	ctx := context.Background()
	if err := rdb.Do(ctx, "CONFIG", "SET", "ratelimit.top-keys", "128").Err(); err != nil {
		t.Fatal(err)
	}
	client := newClient(t, rdb)
	hot := testserver.Unique("top")
	limiter := one(ratelimit.Throttle{Key: hot, Count: 1, Period: minute})
	for range 6 {
		check(t, client, limiter)
	}
	rows, err := client.Top(ctx, 128)
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range rows {
		if row.Key == hot {
			if row.Refusals-row.Error > 5 || row.Refusals < 5 {
				t.Fatalf("5 refusals, counted %+v", row)
			}
			return
		}
	}
	t.Fatalf("%s is not among %+v", hot, rows)
}

func TestBadInputIsAnErrorBeforeAnyCall(t *testing.T) {
	// A server that never answers: a call would cost the whole timeout, and fail otherwise.
	proxy := testserver.NewFrozenProxy(t)
	proxy.Freeze()
	client := newClient(t, redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1}), ratelimit.Timeout(time.Hour))
	ctx := context.Background()
	bad := map[string]func() error{
		"no limiter": func() error { _, err := client.Check(ctx, nil); return err },
		"a nil limiter": func() error {
			_, err := client.Check(ctx, []ratelimit.Limiter{nil})
			return err
		},
		"a zero period": func() error {
			_, err := client.Check(ctx, one(ratelimit.Throttle{Key: "k", Count: 1}))
			return err
		},
		"no key": func() error {
			_, err := client.Check(ctx, one(ratelimit.Log{Limit: 1, Window: minute}))
			return err
		},
		"a limit of 0": func() error {
			_, err := client.Check(ctx, one(ratelimit.Window{Key: "k", Window: minute}))
			return err
		},
		"an unknown priority": func() error {
			_, err := client.Check(ctx, one(ratelimit.Load{Key: "k", Priority: 7}))
			return err
		},
		"a negative quantity": func() error {
			_, err := client.Check(ctx, one(ratelimit.Log{Key: "k", Limit: 1, Window: minute}), ratelimit.Quantity(-1))
			return err
		},
		"delay and force": func() error {
			_, err := client.Check(ctx, one(ratelimit.Log{Key: "k", Limit: 1, Window: minute}), ratelimit.Delay(time.Second), ratelimit.Force())
			return err
		},
		"refund and at most": func() error {
			_, err := client.Check(ctx, one(ratelimit.Log{Key: "k", Limit: 1, Window: minute}), ratelimit.Refund(), ratelimit.AtMost())
			return err
		},
		"a quote in a name": func() error {
			_, err := client.Check(ctx, one(ratelimit.Log{Key: "k", Limit: 1, Window: minute, Name: `a"b`}))
			return err
		},
		"BUCKETS 0": func() error {
			_, err := client.Check(ctx, one(ratelimit.Window{Key: "k", Limit: 1, Window: minute, Algorithm: ratelimit.Buckets(0)}))
			return err
		},
		"counts of BUCKETS": func() error {
			_, err := client.Counts(ctx, ratelimit.Window{Key: "k", Limit: 1, Window: minute, Algorithm: ratelimit.Buckets(2)})
			return err
		},
		"a lease of 0": func() error { _, err := client.AcquireLease(ctx, "k", 1, 0, 1); return err },
		"an instance with a space": func() error {
			_, err := client.ReportLoad(ctx, "k", "a b", minute, []ratelimit.Factor{{Name: "cpu", Value: 1}})
			return err
		},
		"no factor":    func() error { _, err := client.ReportLoad(ctx, "k", "a", minute, nil); return err },
		"a count of 0": func() error { _, err := client.Top(ctx, 0); return err },
	}
	for name, call := range bad {
		if err := call(); !errors.Is(err, ratelimit.ErrInvalid) {
			t.Errorf("%s: %v, want ratelimit.ErrInvalid", name, err)
		}
	}
	if _, err := ratelimit.ParseAlgorithm("SPIRAL"); !errors.Is(err, ratelimit.ErrInvalid) {
		t.Errorf("an unknown algorithm: %v", err)
	}
	if _, err := ratelimit.ParsePriority("urgent"); !errors.Is(err, ratelimit.ErrInvalid) {
		t.Errorf("an unknown priority: %v", err)
	}
	for name, opts := range map[string][]ratelimit.ClientOption{
		"no timeout":       {ratelimit.Timeout(0)},
		"a cooldown of -1": {ratelimit.Cooldown(-1)},
		"a policy of 9":    {ratelimit.WithOnError(9)},
		"nil metrics":      {ratelimit.WithMetrics(nil)},
	} {
		if _, err := ratelimit.NewClient(redis.NewClient(&redis.Options{Addr: proxy.Addr()}), opts...); !errors.Is(err, ratelimit.ErrInvalid) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := ratelimit.NewClient(nil); !errors.Is(err, ratelimit.ErrInvalid) {
		t.Errorf("no client: %v", err)
	}
}

// counted is the decisions a client counted, by outcome.
type counted struct {
	ratelimit.NoMetrics
	mu       sync.Mutex
	outcomes map[string]int
}

func (c *counted) Decision(_, outcome string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.outcomes == nil {
		c.outcomes = map[string]int{}
	}
	c.outcomes[outcome]++
}

func (c *counted) of(outcome string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.outcomes[outcome]
}

// sentCommands counts the module's commands a go-redis client sends (a hook).
type sentCommands struct{ atomic.Int64 }

func (c *sentCommands) count(cmds ...redis.Cmder) {
	for _, cmd := range cmds {
		if name := strings.ToLower(cmd.Name()); strings.HasPrefix(name, "cl.") || strings.HasPrefix(name, "rl.") {
			c.Add(1)
		}
	}
}

func (c *sentCommands) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *sentCommands) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.count(cmd)
		return next(ctx, cmd)
	}
}

func (c *sentCommands) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.count(cmds...)
		return next(ctx, cmds)
	}
}

func TestTheDenyCacheShadowModeAndTheMetrics(t *testing.T) {
	rdb := testserver.Client(t)
	sent := &sentCommands{}
	rdb.AddHook(sent)
	metrics := &counted{}
	client := newClient(t, rdb, ratelimit.DenyCache(100), ratelimit.WithMetrics(metrics))
	limiter := one(ratelimit.Throttle{Key: testserver.Unique("cache"), Count: 1, Period: minute})
	check(t, client, limiter)
	check(t, client, limiter) // refused by the server: cached
	before := sent.Load()
	for range 5 {
		if result := check(t, client, limiter); result.Allowed || result.RetryAfter <= 0 {
			t.Fatalf("the cache refuses as the server did: %+v", result)
		}
	}
	// Counted on this test's own connection: the server's command counts include the other
	// packages' tests, which go test runs at the same time on the same server.
	if after := sent.Load(); after != before {
		t.Fatalf("%d calls reached the server", after-before)
	}
	if metrics.of("deny_cache") != 5 || metrics.of("refused") != 1 || metrics.of("allowed") != 1 {
		t.Fatalf("outcomes: %v", metrics.outcomes)
	}

	shadow := newClient(t, rdb, ratelimit.ShadowMode(true), ratelimit.WithMetrics(metrics))
	check(t, shadow, limiter)
	if result := check(t, shadow, limiter); !result.Allowed || !result.Shadow {
		t.Fatalf("shadow lets it through: %+v", result)
	}
	if metrics.of("shadow") < 1 {
		t.Fatalf("outcomes: %v", metrics.outcomes)
	}

	registry := prometheus.NewRegistry()
	prom := ratelimit.NewPrometheusMetrics(registry)
	measured := newClient(t, rdb, ratelimit.WithMetrics(prom))
	named := one(ratelimit.Throttle{Key: testserver.Unique("prom"), Count: 1, Period: minute, Name: "api"})
	check(t, measured, named)
	check(t, measured, named)
	if allowed := testutil.ToFloat64(prom.Decisions().WithLabelValues("api", "allowed")); allowed != 1 {
		t.Fatalf("ratelimit_decisions_total{api, allowed} = %v", allowed)
	}
	if refused := testutil.ToFloat64(prom.Decisions().WithLabelValues("api", "refused")); refused != 1 {
		t.Fatalf("ratelimit_decisions_total{api, refused} = %v", refused)
	}
	families, err := registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, family := range families {
		names = append(names, family.GetName())
	}
	if got := strings.Join(names, ","); got != "ratelimit_decisions_total,ratelimit_server_call_duration_seconds" {
		t.Fatalf("families: %s", got)
	}
	// Registered twice, the metrics are shared.
	if again := ratelimit.NewPrometheusMetrics(registry); again.Decisions() != prom.Decisions() {
		t.Fatal("a second registration shares the first's")
	}
}

func TestQuotaLeasesHoldTheLimitWithACallPerBatch(t *testing.T) {
	client := newClient(t, testserver.Client(t))
	ctx := context.Background()
	window := one(ratelimit.Window{Key: testserver.Unique("quota"), Limit: 200, Window: minute, Algorithm: ratelimit.Fixed})
	quotas := make([]*ratelimit.Quota, 4)
	for index := range quotas {
		quota, err := ratelimit.NewQuota(client, window, 20, minute)
		if err != nil {
			t.Fatal(err)
		}
		quotas[index] = quota
	}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for _, quota := range quotas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				if ok, err := quota.Take(ctx, 1); err == nil && ok {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	var calls int64
	for _, quota := range quotas {
		calls += quota.Calls
		if err := quota.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if admitted.Load() != 200 {
		t.Fatalf("400 requests against 200: %d admitted", admitted.Load())
	}
	if calls > 60 {
		t.Fatalf("%d calls for 400 decisions", calls)
	}
	counts, err := client.Counts(ctx, window[0])
	if err != nil || counts.Current != 200 {
		t.Fatalf("the server counts what was admitted, nothing held: %+v %v", counts, err)
	}
	if _, err := ratelimit.NewQuota(client, window, 0, minute); !errors.Is(err, ratelimit.ErrInvalid) {
		t.Fatalf("a batch of 0: %v", err)
	}
}

func TestSharedListsChangeInOneTransactionAndReadersFollowTheVersion(t *testing.T) {
	client := newClient(t, testserver.Client(t))
	ctx := context.Background()
	hash := testserver.Unique("lists")
	writer, err := ratelimit.NewSharedLists(client, hash, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	reader, _ := ratelimit.NewSharedLists(client, hash, time.Millisecond)
	if found, err := reader.Contains(ctx, "deny", "203.0.113.7"); found || err != nil {
		t.Fatalf("empty: %v %v", found, err)
	}
	if err := writer.Add(ctx, "deny", "203.0.113.7", "1"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Millisecond) // past the reader's interval
	if found, _ := reader.Contains(ctx, "deny", "203.0.113.7"); !found {
		t.Fatal("the reader follows the version")
	}
	if err := writer.Remove(ctx, "deny", "203.0.113.7"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Millisecond)
	if found, _ := reader.Contains(ctx, "deny", "203.0.113.7"); found {
		t.Fatal("removed")
	}
}
