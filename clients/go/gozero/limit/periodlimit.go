// Package limit is a drop-in for go-zero's core/limit: PeriodLimit and TokenLimiter with the
// same constructors, calls and answers, on go-zero's own *redis.Redis, each decision one of the
// module's commands instead of a Lua script. Change the import path from
// github.com/zeromicro/go-zero/core/limit.
//
// PeriodLimit is RL.WINDOW ANCHORED: quota requests in a window that begins with a key's first
// request (with Align, one that ends at the local period's boundary), answering Allowed,
// HitQuota (the last one the quota admits) or OverQuota. TokenLimiter is CL.THROTTLE: rate
// tokens a second, burst at once; while the server fails it decides in the process with
// x/time/rate, as go-zero's does, until a ping every 100 ms answers.
//
// Where it differs, on purpose: the server's clock decides (AllowN's now is read only by the
// in-process fallback); tokens come back evenly rather than once a whole second; a burst below
// half the rate works (go-zero's script then sets a time to live of 0 and fails to the fallback
// on every call); and the keys are go-zero's with "rl:" before them, so that during a rolling
// deploy neither meets the other's state.
package limit

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redisratelimit/ratelimit"
)

const (
	// Unknown is the answer with an error: nothing decided.
	Unknown = iota
	// Allowed is admitted, with more of the quota left.
	Allowed
	// HitQuota is admitted, the last request the quota admits.
	HitQuota
	// OverQuota is refused until the period ends.
	OverQuota
)

// keyPrefix is before go-zero's keys: apart from its scripts' state.
const keyPrefix = "rl:"

// ErrUnknownCode is a reply the limiter could not read.
var ErrUnknownCode = errors.New("unknown status code")

// Store is what the limiters call the server through: go-zero's *redis.Redis as it is.
type Store interface {
	DoCtx(ctx context.Context, args ...any) (any, error)
}

type (
	// PeriodOption changes a PeriodLimit (Align).
	PeriodOption func(l *PeriodLimit)

	// A PeriodLimit admits a quota of requests per key in each period.
	PeriodLimit struct {
		period     int
		quota      int
		limitStore Store
		keyPrefix  string
		align      bool
		now        func() time.Time
	}
)

// NewPeriodLimit returns a PeriodLimit of quota requests every period seconds, on limitStore,
// its keys keyPrefix + key.
func NewPeriodLimit(period, quota int, limitStore Store, keyPrefix string,
	opts ...PeriodOption) *PeriodLimit {
	limiter := &PeriodLimit{
		period:     period,
		quota:      quota,
		limitStore: limitStore,
		keyPrefix:  keyPrefix,
		now:        time.Now,
	}
	for _, opt := range opts {
		if opt != nil {
			opt(limiter)
		}
	}
	return limiter
}

// Align returns a func to customize a PeriodLimit with alignment: its periods end on the local
// clock's multiples of the period (a day's quota from local midnight to midnight).
func Align() PeriodOption {
	return func(l *PeriodLimit) {
		l.align = true
	}
}

// Take is TakeCtx with no deadline.
func (h *PeriodLimit) Take(key string) (int, error) {
	return h.TakeCtx(context.Background(), key)
}

// TakeCtx decides one request of key: Allowed, HitQuota or OverQuota, or Unknown with an
// error.
func (h *PeriodLimit) TakeCtx(ctx context.Context, key string) (int, error) {
	switch {
	case h.limitStore == nil:
		return Unknown, fmt.Errorf("%w: NewPeriodLimit was given no store", ratelimit.ErrInvalid)
	case h.period < 1:
		return Unknown, fmt.Errorf("%w: a period is at least 1 second, not %d", ratelimit.ErrInvalid, h.period)
	case h.quota < 1:
		return OverQuota, nil // go-zero's script counts the request past a quota of 0
	}
	stored := keyPrefix + h.keyPrefix + key
	if h.align {
		now := h.now()
		_, offset := now.Zone()
		local := now.Unix() + int64(offset)
		stored += ":" + strconv.FormatInt(local/int64(h.period), 10)
	}
	limiters := []ratelimit.Limiter{ratelimit.Window{
		Key: stored, Limit: int64(h.quota), Window: time.Duration(h.period) * time.Second,
		Algorithm: ratelimit.Anchored,
	}}
	result, err := run(ctx, h.limitStore, limiters)
	switch {
	case err != nil:
		return Unknown, err
	case !result.Allowed:
		return OverQuota, nil
	case result.Remaining == 0:
		return HitQuota, nil
	}
	return Allowed, nil
}

// run sends limiters' command through store and reads its reply.
func run(ctx context.Context, store Store, limiters []ratelimit.Limiter, opts ...ratelimit.Option) (ratelimit.Result, error) {
	words, err := ratelimit.Command(limiters, opts...)
	if err != nil {
		return ratelimit.Result{}, err
	}
	args := make([]any, len(words))
	for index, word := range words {
		args[index] = word
	}
	reply, err := store.DoCtx(ctx, args...)
	if err != nil {
		return ratelimit.Result{}, err
	}
	result, err := ratelimit.ReadResult(reply, limiters, opts...)
	if err != nil {
		return ratelimit.Result{}, fmt.Errorf("%w: %w", ErrUnknownCode, err)
	}
	return result, nil
}
