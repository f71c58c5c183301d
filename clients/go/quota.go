package ratelimit

import (
	"context"
	"strings"
	"sync"
	"time"
)

// Quota is quota leases for one hot limit (the articles' pre-allocation): a process takes up to
// batch of a limit in one call (AtMost) and spends it locally, so that one key's decisions are
// not bounded by one shard's thread and a round trip each. What is unused hold after it was
// taken is given back (Refund); Close gives back the rest.
//
// The bound: in any window, what N processes admit exceeds what the server alone would admit
// by at most N x batch. While the limit binds (a take got less than it asked for), a take asks
// for half a batch at once, waiting for it on the server (Delay, up to hold), so a binding limit
// costs at most one call per half batch admitted, and a refusal one call per RetryAfter, not
// one per request. Safe for concurrent use: takes queue behind each other.
type Quota struct {
	client   *Client
	limiters []Limiter
	name     string
	batch    int64
	hold     time.Duration
	half     int64

	mu           sync.Mutex
	held         int64
	expiresAt    time.Time
	availableAt  time.Time
	refusedUntil time.Time
	binding      bool
	timer        *time.Timer
	// Decisions taken, units admitted and calls made: what the lease saves.
	Decisions, Admitted, Calls int64
}

// NewQuota takes up to batch of limiters at a time, giving back what is unused after hold.
func NewQuota(client *Client, limiters []Limiter, batch int64, hold time.Duration) (*Quota, error) {
	specs, _, err := prepare(limiters, nil)
	if err != nil {
		return nil, err
	}
	if batch < 1 {
		return nil, invalid("batch is at least 1, not %d", batch)
	}
	if hold <= 0 {
		return nil, invalid("hold is a positive duration, not %v", hold)
	}
	half := (batch + 1) / 2
	for _, one := range specs {
		if one.capacity > 0 {
			half = min(half, one.capacity)
		}
	}
	names := make([]string, len(specs))
	for index, one := range specs {
		names[index] = one.name
	}
	return &Quota{client: client, limiters: limiters, name: strings.Join(names, "+"), batch: batch, hold: hold, half: half}, nil
}

// Take says whether a request of quantity may go ahead: from what is held, or after taking up
// to batch more in one call.
func (q *Quota) Take(ctx context.Context, quantity int64) (bool, error) {
	if quantity < 1 {
		return false, invalid("quantity is at least 1, not %d", quantity)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.Decisions++
	q.giveBack(ctx, q.expired())
	if q.spend(quantity) {
		q.client.metrics.Decision(q.name, "quota")
		return true, nil
	}
	now := q.client.now()
	if now.Before(q.refusedUntil) || (q.held > 0 && now.Before(q.availableAt)) {
		return false, nil
	}
	binding := q.binding
	var asked int64
	var how Option
	if binding {
		asked = max(min(q.half, q.batch-q.held), quantity-q.held)
		how = Delay(q.hold)
	} else {
		asked = max(q.batch, quantity) - q.held
		how = AtMost()
	}
	result, err := q.client.Check(ctx, q.limiters, Quantity(asked), how)
	q.Calls++
	if err != nil {
		return false, err
	}
	if result.Failed {
		return result.Allowed, nil // decided by the failure policy: nothing taken
	}
	switch {
	case !result.Allowed:
		if result.RetryAfter >= 0 {
			q.refusedUntil = q.client.now().Add(result.RetryAfter)
		}
		q.binding = q.batch > 1
	case binding:
		q.binding = result.Wait > 0
		q.add(asked, result.Wait)
	default:
		q.binding = q.batch > 1 && result.Granted < asked
		q.add(result.Granted, 0)
	}
	return q.spend(quantity), nil
}

func (q *Quota) add(units int64, wait time.Duration) {
	if units <= 0 {
		return
	}
	now := q.client.now()
	q.availableAt = now.Add(wait)
	if q.held == 0 {
		q.expiresAt = now.Add(wait + q.hold)
	}
	q.held += units
	q.arm()
}

func (q *Quota) spend(quantity int64) bool {
	if q.held < quantity || q.client.now().Before(q.availableAt) {
		return false
	}
	q.held -= quantity
	q.Admitted += quantity
	return true
}

func (q *Quota) expired() int64 {
	if q.held > 0 && !q.client.now().Before(q.expiresAt) {
		return q.release()
	}
	return 0
}

func (q *Quota) release() int64 {
	units := q.held
	q.held = 0
	return units
}

func (q *Quota) giveBack(ctx context.Context, units int64) {
	if units > 0 {
		// A give-back that fails ends with the limit's own window.
		_, _ = q.client.Check(ctx, q.limiters, Quantity(units), Refund())
	}
}

// arm gives back at the hold's end even if no request comes to notice it.
func (q *Quota) arm() {
	if q.timer != nil || q.held == 0 {
		return
	}
	wait := max(q.expiresAt.Sub(q.client.now()), 0)
	q.timer = time.AfterFunc(wait, func() {
		q.mu.Lock()
		defer q.mu.Unlock()
		q.timer = nil
		q.giveBack(context.Background(), q.expired())
		q.arm()
	})
}

// Close gives back whatever is held.
func (q *Quota) Close(ctx context.Context) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.timer != nil {
		q.timer.Stop()
		q.timer = nil
	}
	units := q.release()
	if units > 0 {
		_, err := q.client.Check(ctx, q.limiters, Quantity(units), Refund())
		return err
	}
	return nil
}
