package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Client is every command of the module on one go-redis client (a *redis.Client, a
// *redis.ClusterClient, any redis.UniversalClient): typed results, each call bounded by the
// context's deadline and the client's Timeout, whichever ends first, decided by the failure
// policy when the server fails. Safe for concurrent use: one per application.
type Client struct {
	rdb     redis.UniversalClient
	timeout time.Duration
	circuit *circuit
	cache   *denyCache
	metrics Metrics
	shadow  bool
	now     func() time.Time
	logger  *slog.Logger
	// bounded: go-redis ends a call at its context's deadline (ContextTimeoutEnabled), so a
	// call needs no goroutine of its own to be bounded by it.
	bounded bool
}

// A ClientOption configures a Client.
type ClientOption func(*Client)

// Timeout is the most a call waits, whatever go-redis' own timeouts and retries (1 s).
func Timeout(d time.Duration) ClientOption { return func(c *Client) { c.timeout = d } }

// WithOnError is what a decision is when the server fails (Raise).
func WithOnError(policy OnError) ClientOption { return func(c *Client) { c.circuit.onError = policy } }

// Cooldown is how long after a failure decisions go by the policy without asking (1 s).
func Cooldown(d time.Duration) ClientOption { return func(c *Client) { c.circuit.cooldown = d } }

// DenyCache answers up to keys standing refusals locally (none).
func DenyCache(keys int) ClientOption {
	return func(c *Client) {
		if keys > 0 {
			c.cache = newDenyCache(keys, c.now)
		}
	}
}

// WithMetrics counts the decisions and times the calls (NoMetrics).
func WithMetrics(metrics Metrics) ClientOption { return func(c *Client) { c.metrics = metrics } }

// ShadowMode lets refused requests through, counted as "shadow" and logged.
func ShadowMode(on bool) ClientOption { return func(c *Client) { c.shadow = on } }

// WithClock reads the time from now (the tests').
func WithClock(now func() time.Time) ClientOption {
	return func(c *Client) { c.now, c.circuit.now = now, now }
}

// WithLogger logs through logger (slog's default).
func WithLogger(logger *slog.Logger) ClientOption {
	return func(c *Client) { c.logger, c.circuit.logger = logger, logger }
}

// NewClient is a Client on rdb; an error for a bad option (a timeout or cool-down not
// positive, an unknown policy).
func NewClient(rdb redis.UniversalClient, opts ...ClientOption) (*Client, error) {
	if rdb == nil {
		return nil, invalid("a go-redis client")
	}
	c := &Client{rdb: rdb, timeout: time.Second, metrics: NoMetrics{}, now: time.Now, logger: slog.Default()}
	c.circuit = &circuit{onError: Raise, cooldown: time.Second, now: time.Now, logger: slog.Default()}
	for _, opt := range opts {
		if opt != nil {
			opt(c)
		}
	}
	c.bounded = respectsDeadlines(rdb)
	switch {
	case c.timeout <= 0:
		return nil, invalid("Timeout is a positive duration, not %v", c.timeout)
	case c.circuit.cooldown <= 0:
		return nil, invalid("Cooldown is a positive duration, not %v", c.circuit.cooldown)
	case c.circuit.onError < Raise || c.circuit.onError > Deny:
		return nil, invalid("unknown failure policy %d", c.circuit.onError)
	case c.metrics == nil:
		return nil, invalid("metrics are NoMetrics{}, not nil")
	}
	return c, nil
}

// Redis is the go-redis client the Client calls through.
func (c *Client) Redis() redis.UniversalClient { return c.rdb }

// OnError is the client's failure policy.
func (c *Client) OnError() OnError { return c.circuit.onError }

// send is one command within the deadline, through the circuit.
func (c *Client) send(ctx context.Context, words []string) (any, error) {
	if c.circuit.open() {
		return nil, c.circuit.unavailable()
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	started := c.now()
	reply, err := c.within(ctx, func(ctx context.Context) (any, error) { return c.do(ctx, words) })
	if err == nil {
		c.circuit.succeeded()
		c.metrics.ServerCall(c.now().Sub(started))
		return reply, nil
	}
	if serverFailed(err) {
		c.circuit.failed(err)
		return nil, &ServerUnavailableError{Err: err, RetryAfter: c.circuit.retryAfter()}
	}
	c.circuit.succeeded() // the server answered: the call was wrong
	return nil, err
}

// respectsDeadlines says whether rdb ends a call at its context's deadline: go-redis does only
// with ContextTimeoutEnabled, and otherwise waits out its own ReadTimeout (and retries).
func respectsDeadlines(rdb redis.UniversalClient) bool {
	switch client := rdb.(type) {
	case *redis.Client:
		return client.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return client.Options().ContextTimeoutEnabled
	}
	return false
}

type outcome struct {
	reply any
	err   error
}

// within is call, ended at ctx's deadline whatever the driver does: a driver that does not
// watch the deadline is left to finish in a goroutine of its own, its answer dropped. Meanwhile
// the request ctx watches, if any, is waiting on the server (WatchRequest).
func (c *Client) within(ctx context.Context, call func(context.Context) (any, error)) (any, error) {
	defer waitingOnServer(ctx)()
	if c.bounded {
		return call(ctx)
	}
	done := make(chan outcome, 1)
	go func() {
		reply, err := call(ctx)
		done <- outcome{reply, err}
	}()
	select {
	case got := <-done:
		return got.reply, got.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func args(words []string) []any {
	out := make([]any, len(words))
	for index, word := range words {
		out[index] = word
	}
	return out
}

// do sends words to the server, or on a Cluster to the primary of the command's key.
func (c *Client) do(ctx context.Context, words []string) (any, error) {
	if cluster, ok := c.rdb.(*redis.ClusterClient); ok {
		if key := routingKey(words); key != "" {
			node, err := cluster.MasterForKey(ctx, key)
			if err != nil {
				return nil, err
			}
			return node.Do(ctx, args(words)...).Result()
		}
	}
	return c.rdb.Do(ctx, args(words)...).Result()
}

// policy is what a decision is counted under: the limiters' names, joined by "+".
func policy(specs []spec) string {
	names := make([]string, len(specs))
	for index, one := range specs {
		names[index] = one.name
	}
	return strings.Join(names, "+")
}

// Check is one request against every limiter, all or nothing, in one call. A refusal is a
// Result with Allowed false, not an error; an error is a bad argument (before any call), a
// call the server refused, or, under Raise, the server failing (*ServerUnavailableError).
func (c *Client) Check(ctx context.Context, limiters []Limiter, opts ...Option) (Result, error) {
	specs, o, err := prepare(limiters, opts)
	if err != nil {
		return Result{}, err
	}
	return c.decide(ctx, specs, o)
}

// Peek is what Check would answer now, without writing (the _RO variants).
func (c *Client) Peek(ctx context.Context, limiters []Limiter, quantity int64) (Result, error) {
	return c.Check(ctx, limiters, Quantity(quantity), ReadOnly())
}

// Acquire waits for a slot, as Guava's tryAcquire(timeout): one call with Delay, then a sleep
// of the wait the module gives (or until ctx ends: the slot stays taken); it returns at once,
// refused, when the turn is further than timeout away.
func (c *Client) Acquire(ctx context.Context, limiters []Limiter, quantity int64, timeout time.Duration) (Result, error) {
	result, err := c.Check(ctx, limiters, Quantity(quantity), Delay(timeout))
	if err != nil || !result.Allowed || result.Wait <= 0 {
		return result, err
	}
	timer := time.NewTimer(result.Wait)
	defer timer.Stop()
	select {
	case <-timer.C:
		return result, nil
	case <-ctx.Done():
		return result, ctx.Err()
	}
}

func (c *Client) decide(ctx context.Context, specs []spec, o options) (Result, error) {
	name := policy(specs)
	shadow := c.shadow
	if o.shadow != nil {
		shadow = *o.shadow
	}
	var cacheKey string
	if c.cache != nil && !o.refund && !o.force {
		keyed := o
		keyed.quantity = 0
		cacheKey = strings.Join(command(specs, keyed), "\x00")
		if cached, ok := c.cache.get(cacheKey, o.quantity); ok {
			return c.refused(ctx, name, specs, cached, "deny_cache", shadow), nil
		}
	}
	reply, err := c.send(ctx, command(specs, o))
	if err != nil {
		return c.withoutServer(ctx, name, err)
	}
	result, err := readResult(reply, specs, o)
	if err != nil {
		return Result{}, err
	}
	if cacheKey != "" && result.ShedLevel == 0 {
		c.cache.put(cacheKey, o.quantity, result)
	}
	if result.ShedLevel > 0 {
		MarkOwn(ctx)
	}
	if !result.Allowed {
		outcome := "refused"
		if result.ShedLevel > 0 {
			outcome = "shed"
		}
		return c.refused(ctx, name, specs, result, outcome, shadow), nil
	}
	if result.Wait > 0 {
		c.metrics.Decision(name, "delayed")
	} else {
		c.metrics.Decision(name, "allowed")
	}
	return result, nil
}

// withoutServer is the failure policy's decision for a call that failed (the error, under
// Raise, or for a bad call).
func (c *Client) withoutServer(ctx context.Context, name string, err error) (Result, error) {
	var down *ServerUnavailableError
	if !errors.As(err, &down) {
		return Result{}, err
	}
	if c.circuit.onError != Allow {
		MarkOwn(ctx)
	}
	switch c.circuit.onError {
	case Allow:
		c.metrics.Decision(name, "failed_open")
		return Result{Allowed: true, RetryAfter: -1, Granted: -1, Failed: true}, nil
	case Deny:
		c.metrics.Decision(name, "failed_closed")
		return Result{RetryAfter: down.RetryAfter, Granted: -1, Failed: true}, nil
	}
	return Result{}, err
}

func (c *Client) refused(ctx context.Context, name string, specs []spec, result Result, outcome string, shadow bool) Result {
	if !shadow {
		c.metrics.Decision(name, outcome)
		return result
	}
	c.metrics.Decision(name, "shadow")
	keys := make([]string, len(specs))
	for index, one := range specs {
		keys[index] = one.key
	}
	c.logger.WarnContext(ctx, "rate limiter: shadow: would refuse", "policy", name, "keys", strings.Join(keys, ", "))
	result.Allowed, result.Shadow = true, true
	return result
}

// Counts is what a FIXED, SLIDING or ANCHORED window, or a log, counts.
func (c *Client) Counts(ctx context.Context, limiter Limiter) (Counts, error) {
	words, err := CountsCommand(limiter)
	if err != nil {
		return Counts{}, err
	}
	reply, err := c.send(ctx, words)
	if err != nil {
		return Counts{}, err
	}
	return ReadCounts(limiter, reply)
}

// AcquireLease is RL.ACQUIRE: quantity of limit slots for lease; the id is 0 when refused.
// While the server fails the policy decides: Allow grants a lease with id 0 (nothing to
// release), Deny refuses it.
func (c *Client) AcquireLease(ctx context.Context, key string, limit int64, lease time.Duration, quantity int64) (Lease, error) {
	words, err := LeaseCommand(key, limit, lease, quantity, false)
	if err != nil {
		return Lease{}, err
	}
	return c.lease(ctx, words)
}

// PeekLease is RL.ACQUIRE_RO: what AcquireLease would answer, taking nothing.
func (c *Client) PeekLease(ctx context.Context, key string, limit int64, lease time.Duration, quantity int64) (Lease, error) {
	words, err := LeaseCommand(key, limit, lease, quantity, true)
	if err != nil {
		return Lease{}, err
	}
	return c.lease(ctx, words)
}

func (c *Client) lease(ctx context.Context, words []string) (Lease, error) {
	reply, err := c.send(ctx, words)
	if err != nil {
		result, err := c.withoutServer(ctx, "lease", err)
		return Lease{Result: result}, err
	}
	lease, err := ReadLease(reply)
	if err != nil {
		return Lease{}, err
	}
	if lease.Allowed {
		c.metrics.Decision("lease", "allowed")
	} else {
		c.metrics.Decision("lease", "refused")
	}
	return lease, nil
}

// ReleaseLease is RL.RELEASE: frees a lease at once; false when it was no longer held, or when
// the server was not reached (the lease ends at its expiry).
func (c *Client) ReleaseLease(ctx context.Context, key string, id int64) (bool, error) {
	words, err := ReleaseCommand(key, id)
	if err != nil || id == 0 {
		return false, err
	}
	return c.held(ctx, words, false)
}

// RenewLease is RL.RENEW: extends a held lease to lease from now; while the server fails, true
// under Allow (keep working), false under Deny.
func (c *Client) RenewLease(ctx context.Context, key string, id int64, lease time.Duration) (bool, error) {
	words, err := RenewCommand(key, id, lease)
	if err != nil {
		return false, err
	}
	if id == 0 {
		return c.held(ctx, nil, true)
	}
	return c.held(ctx, words, true)
}

func (c *Client) held(ctx context.Context, words []string, renewing bool) (bool, error) {
	var reply any
	var err error
	if words == nil {
		err = c.circuit.unavailable()
	} else {
		reply, err = c.send(ctx, words)
	}
	if err == nil {
		n, err := integer(reply)
		return n == 1, err
	}
	var down *ServerUnavailableError
	if !errors.As(err, &down) || c.circuit.onError == Raise {
		return false, err
	}
	return renewing && c.circuit.onError == Allow, nil
}

// Top is RL.TOP: the keys refused most over the current and the previous minute, on the
// server or merged from every primary of a Cluster.
func (c *Client) Top(ctx context.Context, count int) ([]TopKey, error) {
	if count < 1 {
		return nil, invalid("count is at least 1, not %d", count)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	words := []any{"RL.TOP", strconv.Itoa(count)}
	replies, err := c.within(ctx, func(ctx context.Context) (any, error) { return c.topReplies(ctx, words) })
	if err != nil {
		return nil, err
	}
	return MergeTop(replies.([]any), count)
}

// topReplies is RL.TOP's reply from the server, or from every primary of a Cluster.
func (c *Client) topReplies(ctx context.Context, words []any) ([]any, error) {
	var replies []any
	if cluster, ok := c.rdb.(*redis.ClusterClient); ok {
		var mu sync.Mutex
		err := cluster.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			reply, err := node.Do(ctx, words...).Result()
			if err != nil {
				return err
			}
			mu.Lock()
			replies = append(replies, reply)
			mu.Unlock()
			return nil
		})
		if err != nil {
			return nil, err
		}
	} else {
		reply, err := c.rdb.Do(ctx, words...).Result()
		if err != nil {
			return nil, err
		}
		replies = append(replies, reply)
	}
	return replies, nil
}

// Metrics is where the client counts its decisions.
func (c *Client) Metrics() Metrics { return c.metrics }

// ReportLoad is RL.LOAD.REPORT: an instance's factors, counting for ttl, and the service's
// standing the server answers (package load reports through it once an interval).
func (c *Client) ReportLoad(ctx context.Context, key, instance string, ttl time.Duration, factors []Factor) (Standing, error) {
	switch {
	case checkKey(key) != nil:
		return Standing{}, checkKey(key)
	case CheckInstance(instance) != nil:
		return Standing{}, CheckInstance(instance)
	case positive("ttl", ttl) != nil:
		return Standing{}, positive("ttl", ttl)
	case len(factors) == 0:
		return Standing{}, invalid("at least one factor")
	}
	reply, err := c.send(ctx, ReportCommand(key, instance, ttl, factors))
	if err != nil {
		return Standing{}, err
	}
	return ReadStanding(reply)
}

// LoadPolicy is RL.LOAD.POLICY key: the service's policy in force, in the words that set it.
func (c *Client) LoadPolicy(ctx context.Context, key string) ([]string, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	reply, err := c.send(ctx, []string{"RL.LOAD.POLICY", key})
	if err != nil {
		return nil, err
	}
	values, err := array(reply)
	if err != nil {
		return nil, err
	}
	words := make([]string, len(values))
	for index, value := range values {
		if bytes, ok := value.([]byte); ok {
			value = string(bytes)
		}
		words[index] = fmt.Sprint(value)
	}
	return words, nil
}

// CheckInstance says what is wrong with an instance's name, if anything: it is 1 to 64
// letters, digits, _, -, . or :.
func CheckInstance(name string) error {
	valid := len(name) >= 1 && len(name) <= 64
	for _, r := range name {
		valid = valid && (strings.ContainsRune("_-.:", r) ||
			(r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9'))
	}
	if !valid {
		return invalid("an instance is 1 to 64 letters, digits, _ - . or :, not %q", name)
	}
	return nil
}
