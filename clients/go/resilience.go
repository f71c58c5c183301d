package ratelimit

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// OnError is what a decision is when the server fails: the failure policy.
type OnError int

const (
	// Raise returns the error (a *ServerUnavailableError), as go-redis does: the default.
	Raise OnError = iota
	// Allow admits, Failed set and nothing counted (Kong's fault_tolerant).
	Allow
	// Deny refuses, Failed set; the middleware answers 503 with Retry-After.
	Deny
)

func (o OnError) String() string {
	switch o {
	case Allow:
		return "allow"
	case Deny:
		return "deny"
	}
	return "raise"
}

// ServerUnavailableError is the server failing (unreachable, no answer within the deadline,
// loading, failing over), or having failed less than a cool-down ago: not a refusal of a bad
// call. RetryAfter is how long until it is asked again.
type ServerUnavailableError struct {
	Err        error
	RetryAfter time.Duration
}

func (e *ServerUnavailableError) Error() string {
	return "ratelimit: the server is unavailable: " + e.Err.Error()
}

func (e *ServerUnavailableError) Unwrap() error { return e.Err }

// unavailable are the replies that say the server cannot serve now, by their first word.
var unavailable = map[string]bool{
	"LOADING": true, "MASTERDOWN": true, "CLUSTERDOWN": true, "TRYAGAIN": true, "READONLY": true, "BUSY": true,
}

// serverFailed says whether err is the server failing rather than refusing a bad call: the
// deadline, the connection, or a reply saying it cannot serve now. Any other reply of the
// server's is the caller's.
func serverFailed(err error) bool {
	if err == nil || errors.Is(err, redis.Nil) {
		return false
	}
	var reply redis.Error
	if errors.As(err, &reply) {
		word, _, _ := strings.Cut(reply.Error(), " ")
		return unavailable[word]
	}
	var netErr net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		errors.As(err, &netErr) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, redis.ErrClosed) || errors.Is(err, redis.ErrPoolTimeout) ||
		strings.Contains(err.Error(), "connection") || strings.Contains(err.Error(), "i/o timeout")
}

// circuit is one client's failure policy. Closed, every call asks the server. A failure opens
// it for cooldown: no call asks. Then it is half-open: the first call to ask is the probe, and
// until its answer closes the circuit or its failure opens it again, the others decide as while
// open. A probe that never reports back stops counting after a cool-down. Errors are logged at
// most once a second.
type circuit struct {
	onError  OnError
	cooldown time.Duration
	now      func() time.Time
	logger   *slog.Logger

	mu         sync.Mutex
	openUntil  time.Time
	probeUntil time.Time
	loggedAt   time.Time
	lastError  error
}

// open says whether this call decides without asking; a call told false asks (the probe, after
// a failure).
func (c *circuit) open() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.openUntil.IsZero() {
		return false
	}
	now := c.now()
	if now.Before(c.openUntil) || now.Before(c.probeUntil) {
		return true
	}
	c.probeUntil = now.Add(c.cooldown)
	return false
}

func (c *circuit) succeeded() {
	c.mu.Lock()
	c.openUntil, c.probeUntil = time.Time{}, time.Time{}
	c.mu.Unlock()
}

func (c *circuit) failed(err error) {
	c.mu.Lock()
	now := c.now()
	c.openUntil = now.Add(c.cooldown)
	c.lastError = err
	log := now.Sub(c.loggedAt) >= time.Second
	if log {
		c.loggedAt = now
	}
	c.mu.Unlock()
	if log {
		c.logger.Error("rate limiter: the server failed", "error", err, "deciding", c.onError.String(), "for", c.cooldown)
	}
}

// retryAfter is how long until the server is asked again (or the probe out has its answer).
func (c *circuit) retryAfter() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	left := max(c.openUntil.Sub(now), c.probeUntil.Sub(now))
	return max(left, 0)
}

func (c *circuit) unavailable() *ServerUnavailableError {
	c.mu.Lock()
	last := c.lastError
	c.mu.Unlock()
	if last == nil {
		last = errors.New("no answer")
	}
	return &ServerUnavailableError{
		Err:        fmt.Errorf("the server failed less than %v ago: %w", c.cooldown, last),
		RetryAfter: c.retryAfter(),
	}
}

// denyCache answers refusals locally while they stand: at most size of them, the least
// recently used out. It only ever refuses what the server refused, never for longer than it
// said, for the same command and a quantity not smaller.
type denyCache struct {
	size    int
	now     func() time.Time
	mu      sync.Mutex
	order   *list.List
	entries map[string]*list.Element
}

type denied struct {
	key      string
	until    time.Time
	quantity int64
	result   Result
	cachedAt time.Time
}

func newDenyCache(size int, now func() time.Time) *denyCache {
	return &denyCache{size: size, now: now, order: list.New(), entries: map[string]*list.Element{}}
}

func (d *denyCache) get(key string, quantity int64) (Result, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	element, ok := d.entries[key]
	if !ok {
		return Result{}, false
	}
	entry := element.Value.(*denied)
	now := d.now()
	if !now.Before(entry.until) {
		d.order.Remove(element)
		delete(d.entries, key)
		return Result{}, false
	}
	if quantity < entry.quantity {
		return Result{}, false
	}
	d.order.MoveToFront(element)
	return aged(entry.result, now.Sub(entry.cachedAt), entry.until.Sub(now)), true
}

func aged(result Result, elapsed, retryAfter time.Duration) Result {
	result.RetryAfter = retryAfter
	result.ResetAfter = max(result.ResetAfter-elapsed, 0)
	if len(result.Each) > 0 {
		each := make([]Result, len(result.Each))
		for index, one := range result.Each {
			if one.RetryAfter >= 0 {
				one.RetryAfter = max(one.RetryAfter-elapsed, 0)
			}
			one.ResetAfter = max(one.ResetAfter-elapsed, 0)
			each[index] = one
		}
		result.Each = each
	}
	return result
}

func (d *denyCache) put(key string, quantity int64, result Result) {
	if result.Allowed || result.RetryAfter <= 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.now()
	entry := &denied{key: key, until: now.Add(result.RetryAfter), quantity: quantity, result: result, cachedAt: now}
	if element, ok := d.entries[key]; ok {
		element.Value = entry
		d.order.MoveToFront(element)
		return
	}
	d.entries[key] = d.order.PushFront(entry)
	for d.order.Len() > d.size {
		oldest := d.order.Back()
		d.order.Remove(oldest)
		delete(d.entries, oldest.Value.(*denied).key)
	}
}

// answered marks a request's answer as the package's own (a refusal, the failure policy's
// answer, a load gate's shed): a load shedder counts it as nothing of the service's health. It
// also carries what the shedder does while the request waits on the rate-limit server.
type answered struct {
	own   atomic.Bool
	waits func(begins bool)
}

type answeredKey struct{}

// WatchAnswer is ctx with a mark the package sets when it answers the request by its policy
// (a load shedder puts it there; Answered reads it).
func WatchAnswer(ctx context.Context) context.Context {
	return WatchRequest(ctx, nil)
}

// WatchRequest is WatchAnswer, and waits (if not nil) is called with true as the request begins
// a wait on the rate-limit server and false as the wait ends: a load shedder leaves it out of
// the requests in flight meanwhile (a frozen server's timeout is not the service's concurrency).
func WatchRequest(ctx context.Context, waits func(begins bool)) context.Context {
	return context.WithValue(ctx, answeredKey{}, &answered{waits: waits})
}

// waitingOnServer tells ctx's request's shedder, if any, that a wait on the server begins; the
// function it returns tells it the wait ended.
func waitingOnServer(ctx context.Context) func() {
	mark, ok := ctx.Value(answeredKey{}).(*answered)
	if !ok || mark.waits == nil {
		return func() {}
	}
	mark.waits(true)
	return func() { mark.waits(false) }
}

// MarkOwn marks ctx's request as answered by the package's policy, if it is watched.
func MarkOwn(ctx context.Context) {
	if mark, ok := ctx.Value(answeredKey{}).(*answered); ok {
		mark.own.Store(true)
	}
}

// Answered says whether the package answered ctx's request by its policy.
func Answered(ctx context.Context) bool {
	mark, ok := ctx.Value(answeredKey{}).(*answered)
	return ok && mark.own.Load()
}

// CountsForService says whether a response with HTTP status says anything about the service:
// not a limit's refusal (429, whoever made it), and not a 5xx the package made by its policy.
func CountsForService(status int, own bool) bool {
	return status != 429 && (!own || status < 500)
}
