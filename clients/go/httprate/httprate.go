// Package httprate is net/http middleware for the module's limits: func(http.Handler)
// http.Handler, which chi, gorilla/mux and the standard mux take as they are. Each request is
// checked against every limiter in one decision, its key a function of the request; a refused
// one gets 429 with Retry-After and the IETF RateLimit fields (draft-ietf-httpapi-ratelimit-
// headers), an admitted one the fields and the handler.
//
// While the server fails, the client's failure policy decides: Allow lets the request through,
// Deny and Raise (the default) answer 503 with Retry-After, until the circuit's probe finds the
// server back. A load gate in the limiters that sheds the request answers 503 too.
package httprate

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/redisratelimit/ratelimit"
)

// KeyFunc is what a request is limited by, appended to each limiter's Key; "" leaves the request
// unlimited (a route no limit applies to, a caller on an allow list).
type KeyFunc func(*http.Request) string

// KeyByIP is the client's address (RemoteAddr's host: behind a proxy, read the header it sets
// with KeyByHeader, or use chi's RealIP before this middleware).
func KeyByIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// KeyByHeader is the request's header (an API key, a user's id set by the authentication
// middleware); a request without it is not limited.
func KeyByHeader(name string) KeyFunc {
	return func(r *http.Request) string { return r.Header.Get(name) }
}

type config struct {
	quantity func(*http.Request) int64
	limited  func(http.ResponseWriter, *http.Request, ratelimit.Result)
	failed   func(http.ResponseWriter, *http.Request, error)
}

// An Option changes what the middleware does.
type Option func(*config)

// WithQuantity weighs each request (1 unless given): a batch's size, a query's cost.
func WithQuantity(quantity func(*http.Request) int64) Option {
	return func(c *config) { c.quantity = quantity }
}

// WithLimitHandler answers a refused request instead of the plain 429 (the RateLimit fields and
// Retry-After are set before it is called).
func WithLimitHandler(handler func(http.ResponseWriter, *http.Request, ratelimit.Result)) Option {
	return func(c *config) { c.limited = handler }
}

// WithErrorHandler answers a request the limiter could not decide (the server failing under
// Raise, a call the server refused) instead of 503 (500 for a refused call).
func WithErrorHandler(handler func(http.ResponseWriter, *http.Request, error)) Option {
	return func(c *config) { c.failed = handler }
}

// Limit checks each request against limiters (each Key a prefix of the request's key) in one
// decision on client. It panics on nothing: a bad limiter is an error here, before any request.
func Limit(client *ratelimit.Client, limiters []ratelimit.Limiter, key KeyFunc, opts ...Option) (func(http.Handler) http.Handler, error) {
	if client == nil || key == nil {
		return nil, fmt.Errorf("%w: a client and a key function", ratelimit.ErrInvalid)
	}
	if err := ratelimit.Check(ratelimit.Keyed(limiters, "key")); err != nil {
		return nil, err
	}
	c := config{limited: tooMany, failed: unavailable}
	for _, opt := range opts {
		if opt != nil {
			opt(&c)
		}
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			key := key(r)
			if key == "" {
				next.ServeHTTP(w, r)
				return
			}
			quantity := int64(1)
			if c.quantity != nil {
				quantity = c.quantity(r)
			}
			keyed := ratelimit.Keyed(limiters, key)
			result, err := client.Check(r.Context(), keyed, ratelimit.Quantity(quantity))
			if err != nil {
				ratelimit.MarkOwn(r.Context())
				c.failed(w, r, err)
				return
			}
			if !result.Failed {
				for name, value := range ratelimit.Fields(result, keyed) {
					w.Header().Set(name, value)
				}
			}
			switch {
			case result.Allowed:
				next.ServeHTTP(w, r)
			case result.Failed || result.ShedLevel > 0:
				// The server failing under Deny, or the load gate shedding: the service, not the
				// caller, is the reason.
				ratelimit.MarkOwn(r.Context())
				w.Header().Set("Retry-After", retryAfter(result.RetryAfter))
				http.Error(w, "unavailable: try again later", http.StatusServiceUnavailable)
			default:
				c.limited(w, r, result)
			}
		})
	}, nil
}

// retryAfter is whole seconds, rounded up, at least 1.
func retryAfter(d time.Duration) string {
	return strconv.FormatInt(max(1, int64((d+time.Second-1)/time.Second)), 10)
}

func tooMany(w http.ResponseWriter, _ *http.Request, _ ratelimit.Result) {
	http.Error(w, "too many requests", http.StatusTooManyRequests)
}

// unavailable answers 503 with Retry-After while the server fails, 500 for a call it refused.
func unavailable(w http.ResponseWriter, _ *http.Request, err error) {
	var down *ratelimit.ServerUnavailableError
	if errors.As(err, &down) {
		w.Header().Set("Retry-After", retryAfter(down.RetryAfter))
		http.Error(w, "the rate limiter is unavailable: try again later", http.StatusServiceUnavailable)
		return
	}
	http.Error(w, "the rate limiter failed", http.StatusInternalServerError)
}
